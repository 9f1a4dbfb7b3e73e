enum ReconciliationPlaceholder {}
