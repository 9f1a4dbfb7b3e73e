-- A run's stored summary (iap.reconciliation_runs.statistics, what summary.json and `report` show)
-- names the planned corrections a run took over from an interrupted one `correctionsTakenOver`; it
-- was `correctionsAdopted`, which read as the app's adoption of the job (docs/reports.md, "Reports"):
-- every stored summary is renamed alike, so `report` of an old run reads its count.
UPDATE iap.reconciliation_runs
SET statistics = (statistics - 'correctionsAdopted') || jsonb_build_object('correctionsTakenOver', statistics -> 'correctionsAdopted')
WHERE statistics ? 'correctionsAdopted';
