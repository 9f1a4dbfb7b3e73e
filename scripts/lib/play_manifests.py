"""`scripts/check-manifests --play`: the pod templates of cron/ run as Kubernetes runs them.

Each pod template becomes a Pod run by `podman kube play` with the image scripts/image built
(localhost/receipt-reconciler:latest), against a throwaway PostgreSQL (migrated in the image, 30
demo accounts seeded) and the Apple simulator, both on this host:

- the nightly CronJob's Indexed Job: the pods of completion indexes 0 and 1, together, each running
  its own shard (0/4, 1/4: the summary.json and iap.reconciliation_runs say so) and writing its
  report under /reports/INDEX;
- the answering CronJob (answer-consumption-requests);
- the backfill Job, writing /reports/backfill.

Every pod must exit 0 on a read-only root filesystem, as user 10001, reading the shared secret and
the App Store Connect key from the Secret volume laid out as the kubelet lays it out (root's, group
fsGroup, defaultMode plus group read): the shared secret is not in the environment, so a run whose
accounts the simulator verified read it from the file. Each report must land in its emptyDir.

What differs from the manifests is what Kubernetes or Apple would supply, all of it in one place,
change_list() below, and printed on every run. The database is as after an earlier night in one
way: Apple's notification history read until a day ago (a first read goes 30 days back, about 50 s
at the sandbox's budget split 4 ways); a CONSUMPTION_REQUEST of a consenting customer waits.

What podman 4.3 does not do as Kubernetes does, and is done here instead:
- `$(VAR)` in args is passed on literally: expanded here, as the kubelet expands it;
- a `secret` volume: podman 4.3 panics on one without `optional:`, and with it writes the files
  root's, mode 0644 whatever the defaultMode and fsGroup, with no ..data, into a named volume left
  behind: so the kubelet's layout is made on the host and mounted as a hostPath;
- an emptyDir is a podman volume named after the pod's volume, one for every pod on the host that
  names its volume alike (Kubernetes gives each pod its own): renamed after the pod;
- envFrom secretRef reads a podman secret holding the Secret's `data` as a JSON object of base64
  values (not a Secret document; a Secret document with stringData panics `kube play`); and the
  Secret would win over the container's `env`, where Kubernetes lets `env` win: a key in both is
  refused here;
- `kube play` takes no --ulimit: the open-file limit goes into a containers.conf made from
  image/containers.conf; the pod's infra container needs catatonit (installed when missing).

`scripts/check-manifests --play --self-test` runs the backfill Job's pod unbroken, then with its
secret volume's defaultMode 0444 and with the secret mounted at a wrong path: each broken pod must
fail --play.
"""
import base64
import copy
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

REPOSITORY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.path.join(REPOSITORY, ".build", "release", "receipt-reconciler")  # scripts/image's release build
ACCOUNTS = 30
INDEXES = (0, 1)                    # the completion indexes of an Indexed Job that are played
TIMEOUT = 300                       # seconds a pod may take
SHARED_SECRET = "play-shared-secret"
CONSUMPTION_ACCOUNT = "acct-0000009"  # seed-demo's, holding transaction 2000000009000 (lifetime)
ROOT_CERTIFICATE = "/run/apple-simulator/root.der"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


class Failure(Exception):
    pass


# ---- What differs from the manifests: every change to a pod template, and why. ----

def change_list(stage):
    """(what, why, apply(pod, index)) for every change made to a pod template, in order."""
    apple = {
        "APPLE_PRODUCTION_URL": f"{stage.simulator}/verifyReceipt",
        "APPLE_SANDBOX_URL": f"{stage.simulator}/sandbox/verifyReceipt",
        "APPSTORE_API_URL": stage.simulator,
        "APPSTORE_SANDBOX_API_URL": f"{stage.simulator}/sandbox",
    }

    def completion_index(pod, index):
        if index is None:
            return
        for where in ("annotations", "labels"):
            pod["metadata"].setdefault(where, {})[INDEX_KEY] = str(index)
        for container in pod["spec"]["containers"]:
            if not any(e["name"] == "JOB_COMPLETION_INDEX" for e in container.get("env", [])):
                container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}})

    def expand_args(pod, index):
        for container in pod["spec"]["containers"]:
            environment = container_environment(pod, container, stage.secrets)
            container["args"] = [expand(argument, environment) for argument in container.get("args", [])]

    def secret_volumes(pod, index):
        fs_group = pod["spec"].get("securityContext", {}).get("fsGroup")
        for volume in pod["spec"].get("volumes", []):
            if "secret" in volume:
                name = volume["secret"]["secretName"]
                if name not in stage.secrets:
                    raise Failure(f"the manifests name a Secret --play does not make: {name}")
                directory = os.path.join(stage.work, "volumes", pod["metadata"]["name"], volume["name"])
                lay_out_secret_volume(directory, stage.secrets[name], volume["secret"], fs_group)
                volume.pop("secret")
                volume["hostPath"] = {"path": directory, "type": "Directory"}

    def empty_dirs(pod, index):
        volumes = pod["spec"].get("volumes", [])
        renamed = {v["name"]: f"{pod['metadata']['name']}-{v['name']}" for v in volumes if "emptyDir" in v}
        for volume in volumes:
            volume["name"] = renamed.get(volume["name"], volume["name"])
        for container in pod["spec"]["containers"]:
            for mount in container.get("volumeMounts", []):
                mount["name"] = renamed.get(mount["name"], mount["name"])

    def host_network(pod, index):
        pod["spec"]["hostNetwork"] = True

    def stand_ins(pod, index):
        pod["spec"].setdefault("volumes", []).append(
            {"name": "apple-simulator-root", "hostPath": {"path": stage.root_certificate, "type": "File"}})
        for container in pod["spec"]["containers"]:
            container.setdefault("env", []).extend({"name": k, "value": v} for k, v in apple.items())
            container["args"] = container.get("args", []) + ["--apple-root-certificate", ROOT_CERTIFICATE]
            container.setdefault("volumeMounts", []).append(
                {"name": "apple-simulator-root", "mountPath": ROOT_CERTIFICATE, "readOnly": True})

    return [
        ("kind Pod, named play-JOB[-INDEX]", "a Job's pod template runs as a Pod", lambda pod, index: None),
        (f"an Indexed Job's pod: annotation and label {INDEX_KEY}, env JOB_COMPLETION_INDEX from the annotation",
         "what the Job controller adds", completion_index),
        ("args: $(VAR) expanded from the container's environment",
         "the kubelet does it; podman 4.3 passes $(VAR) on literally", expand_args),
        ("a secret volume: a hostPath directory laid out as the kubelet lays out a Secret (..data symlink, "
         "root's files, group fsGroup, defaultMode plus group read when there is an fsGroup)",
         "podman 4.3 writes a secret volume's files 0644, whatever defaultMode and fsGroup say", secret_volumes),
        ("an emptyDir volume: named POD-VOLUME", "podman 4.3 makes one volume of that name for every pod on the host",
         empty_dirs),
        ("hostNetwork: true", "PostgreSQL and the simulator listen on this host's 127.0.0.1", host_network),
        ("Apple's stand-ins: env " + ", ".join(f"{k}={v}" for k, v in apple.items())
         + f"; args + --apple-root-certificate {ROOT_CERTIFICATE}, the simulator's root (read-only hostPath)",
         "the simulator answers for Apple, its signed data chained to its own test root", stand_ins),
    ]


def pod_from_template(document, template, index, stage):
    """The Pod for one pod template (and completion index), with every change of change_list."""
    name = "play-" + document["metadata"]["name"] + ("" if index is None else f"-{index}")
    metadata = {k: v for k, v in template.get("metadata", {}).items() if k in ("labels", "annotations")}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **copy.deepcopy(metadata)},
           "spec": copy.deepcopy(template["spec"])}
    for _, _, apply in change_list(stage):
        apply(pod, index)
    return pod


# ---- What Kubernetes does, done here. ----

def expand(text, environment):
    """The kubelet's $(VAR) expansion: $$ is $, $(NAME) is NAME's value, an unknown NAME stays."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else environment.get(m.group(1), m.group(0)), text)


def container_environment(pod, container, secrets):
    """A container's environment as the kubelet makes it: envFrom first, env over it."""
    environment = {}
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            environment.update({k: v.decode() for k, v in secrets.get(source["secretRef"]["name"], {}).items()})
    for variable in container.get("env", []):
        if "value" in variable:
            environment[variable["name"]] = expand(variable["value"], environment)
        elif "fieldRef" in variable.get("valueFrom", {}):
            match = re.fullmatch(r"metadata\.(annotations|labels)\['(.+)'\]", variable["valueFrom"]["fieldRef"]["fieldPath"])
            if match and match.group(2) in pod["metadata"].get(match.group(1), {}):
                environment[variable["name"]] = pod["metadata"][match.group(1)][match.group(2)]
    return environment


def lay_out_secret_volume(directory, data, source, fs_group):
    """A secret volume as the kubelet writes it (AtomicWriter, then SetVolumeOwnership, read-only):
    the files in a timestamped directory, `..data` linking to it, each key a link `KEY -> ..data/KEY`;
    all root's; with an fsGroup, their group is it, files get group read (0400 becomes 0440) and
    directories setgid; the volume's root is a tmpfs's, mode 1777 (3777 with the fsGroup)."""
    default_mode = source.get("defaultMode", 0o644)
    items = source.get("items") or [{"key": key, "path": key} for key in sorted(data)]
    group = 0 if fs_group is None else fs_group
    shutil.rmtree(directory, ignore_errors=True)
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + str(random.randrange(10**9))
    os.makedirs(os.path.join(directory, stamp))
    for item in items:
        path = os.path.join(directory, stamp, item["path"])
        with open(path, "wb") as handle:
            handle.write(data[item["key"]])
        os.chown(path, 0, group)
        os.chmod(path, item.get("mode", default_mode) | (0o440 if fs_group is not None else 0))
    os.symlink(stamp, os.path.join(directory, "..data"))
    for top in sorted({item["path"].split("/")[0] for item in items}):
        os.symlink(f"..data/{top}", os.path.join(directory, top))
    for path in [os.path.join(directory, name) for name in os.listdir(directory)] + [directory]:
        os.lchown(path, 0, group)
    os.chmod(os.path.join(directory, stamp), 0o755 | (0o2550 if fs_group is not None else 0))
    os.chmod(directory, 0o1777 | (0o2000 if fs_group is not None else 0))


# ---- The stage: PostgreSQL, the simulator, the Secrets, podman's settings. ----

class Stage:
    """Everything a play needs, made once; close() removes all of it (also what a failure left)."""

    def __init__(self):
        self.cleanups = []

    def open(self):
        self.work = tempfile.mkdtemp(prefix="receipt-reconciler-play.", dir="/tmp")
        os.chmod(self.work, 0o755)  # PostgreSQL runs as postgres from inside it
        self.cleanups.append(lambda: shutil.rmtree(self.work, ignore_errors=True))
        self.environment = dict(os.environ, CONTAINERS_CONF=self.containers_conf())
        self.start_postgres()
        self.seed_and_simulate()
        self.earlier_events()
        self.secrets = self.make_secrets()

    def close(self):
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as error:  # noqa: BLE001 (cleaning up goes on)
                print(f"check-manifests --play: cleaning up: {error}", file=sys.stderr)
        self.cleanups = []

    def podman(self, *arguments, check=True, timeout=None, environment=None):
        result = subprocess.run(["podman", *arguments], env={**self.environment, **(environment or {})},
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise Failure(f"podman {' '.join(arguments)}: {(result.stderr or result.stdout).strip()}")
        return result

    def containers_conf(self):
        """image/containers.conf with the open-file limit `kube play` cannot be given on its command line."""
        hard = subprocess.run(["bash", "-c", "ulimit -Hn"], capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(REPOSITORY, "image", "containers.conf")) as handle:
            text = handle.read()
        text, count = re.subn(r"^default_ulimits = \[", f'default_ulimits = ["nofile={hard}:{hard}", ', text, flags=re.M)
        if count != 1:
            raise Failure("image/containers.conf has no default_ulimits line")
        path = os.path.join(self.work, "containers.conf")
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def start_postgres(self):
        script = ('source scripts/lib/postgres.sh && start_throwaway_postgres "$1" >&2 && trap - EXIT '
                  '&& printf "%s\\n%s\\n%s\\n" "$RR_PG_ADMIN_URL" "$RR_PG_BIN" "$RR_PG_DATA"')
        result = subprocess.run(["bash", "-c", script, "bash", os.path.join(self.work, "postgres")],
                                cwd=REPOSITORY, capture_output=True, text=True)
        if result.returncode != 0:
            raise Failure(f"PostgreSQL did not start: {result.stderr.strip()}")
        self.database_url, self.pg_bin, data = result.stdout.split("\n")[:3]
        stop = 'source scripts/lib/postgres.sh && RR_PG_BIN="$1" && RR_PG_DATA="$2" && stop_throwaway_postgres'
        self.cleanups.append(lambda: subprocess.run(["bash", "-c", stop, "bash", self.pg_bin, data], cwd=REPOSITORY))

    def sql(self, query):
        psql = [os.path.join(self.pg_bin, "psql"), "-X", "-qAt", "-F", "|", "-d", self.database_url, "-c", query]
        return subprocess.run(psql, capture_output=True, text=True, check=True).stdout.strip()

    def seed_and_simulate(self):
        """The schema (migrated by the image's binary), the demo accounts, the simulator."""
        if not os.access(BINARY, os.X_OK):
            raise Failure(f"no release binary at {BINARY}: run scripts/image first")
        migrate = self.podman("run", "--rm", "--network=host", "--read-only", "-e", "DATABASE_URL",
                              "localhost/receipt-reconciler:latest", "migrate", "--log-level", "warning",
                              check=False, environment={"DATABASE_URL": self.database_url})
        if migrate.returncode != 0:
            raise Failure(f"migrate in the image exited {migrate.returncode}: {migrate.stderr.strip()}")
        host = dict(os.environ, DATABASE_URL=self.database_url, APPLE_SHARED_SECRET=SHARED_SECRET)
        scenario = os.path.join(self.work, "api-scenario.json")
        subprocess.run([BINARY, "seed-demo", "--accounts", str(ACCOUNTS), "--api-scenario", scenario], env=host,
                       stdout=subprocess.DEVNULL, check=True)
        signing = os.path.join(self.work, "signing")
        output = open(os.path.join(self.work, "simulator.out"), "w+")
        simulator = subprocess.Popen([BINARY, "simulate-apple", "--shared-secret", SHARED_SECRET, "--signing-dir", signing,
                                      "--scenario", scenario], stdout=output, stderr=subprocess.STDOUT)
        self.cleanups.append(lambda: (simulator.terminate(), simulator.wait(10), output.close()))
        self.root_certificate = os.path.join(signing, "root.der")
        for _ in range(100):
            output.seek(0)
            found = re.search(r"listening.*127\.0\.0\.1:(\d+)", output.read())
            if found and os.path.exists(self.root_certificate):
                self.simulator = f"http://127.0.0.1:{found.group(1)}"
                return
            time.sleep(0.1)
        output.seek(0)
        raise Failure(f"the simulator did not start: {output.read().strip()}")

    def earlier_events(self):
        """A customer who consented asks Apple for a refund: the CONSUMPTION_REQUEST the answering job answers;
        and Apple's notification history read until a day ago, as after an earlier night."""
        now = int(time.time() * 1000)
        request = {"notificationType": "CONSUMPTION_REQUEST", "signedDate": now - 3600000, "data": {
            "bundleId": "com.example.app", "appAppleId": 1234567890, "environment": "Production",
            "consumptionRequestReason": "UNINTENDED_PURCHASE", "transactionInfo": {
                "transactionId": "2000000009000", "originalTransactionId": "2000000009000", "productId": "lifetime",
                "type": "Non-Consumable", "purchaseDate": now - 400 * 86400000}}}
        sign = [BINARY, "simulate-apple", "sign-notifications", "--signing-dir", os.path.join(self.work, "signing")]
        signed = subprocess.run(sign, input=json.dumps(request) + "\n", capture_output=True, text=True, check=True).stdout
        path = os.path.join(self.work, "consumption-request.jsonl")
        with open(path, "w") as handle:
            handle.write(signed)
        subprocess.run([BINARY, "ingest-notifications", path, "--log-level", "warning"], check=True,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, DATABASE_URL=self.database_url))
        self.sql(f"INSERT INTO iap.consumption_consent (account_id, consented) VALUES ('{CONSUMPTION_ACCOUNT}', true)")
        self.sql("INSERT INTO iap.notification_history_watermarks (environment, read_until) "
                 "VALUES ('Production', now() - interval '1 day'), ('Sandbox', now() - interval '1 day')")

    def make_secrets(self):
        """The two Secrets of docs/operating.md ("The manifests"), as `data`; the shared secret only as a file."""
        key = os.path.join(self.work, "AuthKey.p8")
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
                       check=True, stderr=subprocess.DEVNULL)
        with open(key, "rb") as handle:
            files = {"AuthKey.p8": handle.read(), "shared-secret": SHARED_SECRET.encode()}
        environment = {"DATABASE_URL": self.database_url, "APPSTORE_ISSUER_ID": "play-issuer",
                       "APPSTORE_KEY_ID": "PLAYKEY001", "APPSTORE_BUNDLE_ID": "com.example.app",
                       "APPSTORE_APP_APPLE_ID": "1234567890"}
        secrets = {"receipt-reconciler": {k: v.encode() for k, v in environment.items()}, "receipt-reconciler-files": files}
        # envFrom reads a podman secret: in podman 4.3's form, the Secret's `data` as a JSON object.
        if self.podman("secret", "inspect", "receipt-reconciler", check=False).returncode == 0:
            raise Failure("a podman secret receipt-reconciler exists already (left by an earlier --play?): "
                          "podman secret rm receipt-reconciler")
        path = os.path.join(self.work, "secret-receipt-reconciler.json")
        with open(path, "w") as handle:
            json.dump({k: base64.b64encode(v).decode() for k, v in secrets["receipt-reconciler"].items()}, handle)
        self.podman("secret", "create", "receipt-reconciler", path)
        self.cleanups.append(lambda: self.podman("secret", "rm", "receipt-reconciler", check=False))
        return secrets


# ---- Playing the pods. ----

def pods_to_play(paths):
    """(label, document, template, index, shard) of every pod --play runs, an Indexed Job's for each of INDEXES,
    whose shard must be INDEX/COMPLETIONS (the shard of any other: as its args say)."""
    pods = []
    for path in paths:
        with open(path) as handle:
            for document in yaml.safe_load_all(handle):
                if not document or document.get("kind") not in ("CronJob", "Job"):
                    continue
                job = document["spec"]["jobTemplate"]["spec"] if document["kind"] == "CronJob" else document["spec"]
                where = f"{document['kind']}/{document['metadata']['name']}"
                if job.get("completionMode") == "Indexed":
                    pods += [(f"{where} index {i}", document, job["template"], i, f"{i}/{job['completions']}")
                             for i in INDEXES]
                else:
                    pods.append((where, document, job["template"], None, None))
    return pods


def refuse_what_podman_gets_wrong(pod, stage):
    """What --play cannot run as Kubernetes would, and what of it is left on this host (a pod or an emptyDir volume
    of the same name: podman would take it up), refused before anything runs, so that nothing but --play's is removed."""
    name = pod["metadata"]["name"]
    if len(pod["spec"]["containers"]) != 1:
        raise Failure(f"{name}: --play plays pods of one container")
    container = pod["spec"]["containers"][0]
    from_secrets = {key for source in container.get("envFrom", []) if "secretRef" in source
                    for key in stage.secrets.get(source["secretRef"]["name"], {})}
    both = from_secrets & {e["name"] for e in container.get("env", [])}
    if both:
        raise Failure(f"{name}: {', '.join(sorted(both))} both in env and in a Secret: "
                      "podman 4.3 lets the Secret win, Kubernetes env")
    if stage.podman("pod", "exists", name, check=False).returncode == 0:
        raise Failure(f"a pod {name} exists already (left by an earlier --play?): podman pod rm -f {name}")
    for volume in pod["spec"].get("volumes", []):
        if "emptyDir" in volume and stage.podman("volume", "exists", volume["name"], check=False).returncode == 0:
            raise Failure(f"a volume {volume['name']} exists already (left by an earlier --play?): "
                          f"podman volume rm {volume['name']}")


def play_group(stage, group):
    """Runs the pods of one group together (an Indexed Job's indexes run in parallel) and checks each."""
    started = []
    try:
        for label, document, template, index, shard in group:
            pod = pod_from_template(document, template, index, stage)
            refuse_what_podman_gets_wrong(pod, stage)
            path = os.path.join(stage.work, "pods", pod["metadata"]["name"] + ".yaml")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                yaml.safe_dump(pod, handle, sort_keys=False)
            started.append((label, pod, shard))
            stage.podman("kube", "play", "--quiet", path)
        lines = [check_pod(stage, label, pod, shard) for label, pod, shard in started]
        reports = [report_dir(pod["spec"]["containers"][0]) for _, pod, _ in started]
        if len(set(reports)) < len(reports):
            labels = ", ".join(label for label, _, _ in started)
            raise Failure(f"{labels}: the pods of one Job write the same report directory")
        return lines
    finally:
        for _, pod, _ in started:
            remove_pod(stage, pod)


def remove_pod(stage, pod):
    stage.podman("pod", "rm", "--force", pod["metadata"]["name"], check=False)
    for volume in pod["spec"].get("volumes", []):
        if "emptyDir" in volume:
            stage.podman("volume", "rm", "--force", volume["name"], check=False)


def report_dir(container):
    arguments = container["args"]
    return arguments[arguments.index("--report-dir") + 1] if "--report-dir" in arguments else None


def check_pod(stage, label, pod, shard):
    """The container's exit and security as run, then what its command did: the line of a pod that passed."""
    container = pod["spec"]["containers"][0]
    name = f"{pod['metadata']['name']}-{container['name']}"
    label = f"{label} (pod {pod['metadata']['name']})"
    try:
        stage.podman("wait", name, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failure(f"{label}: still running after {TIMEOUT} s{last_lines(stage, name)}")
    state = json.loads(stage.podman("container", "inspect", name).stdout)[0]
    if state["State"]["ExitCode"] != 0:
        raise Failure(f"{label}: exit {state['State']['ExitCode']}{last_lines(stage, name)}")
    with open(state["OCIConfigPath"]) as handle:
        check_security(label, pod, container, json.load(handle))
    command = container["args"][0]
    if command == "answer-consumption-requests":
        return f"{label}: exit 0, {check_answers(stage, label)}"
    return f"{label}: exit 0, {check_report(stage, label, pod, container, shard)}"


def check_security(label, pod, container, oci):
    """What the runtime was told (the OCI config): the pod's and the container's securityContext applied."""
    context, own = pod["spec"].get("securityContext", {}), container.get("securityContext", {})
    user, wrong = oci["process"]["user"], []
    if own.get("readOnlyRootFilesystem") and oci["root"].get("readonly") is not True:
        wrong.append("a writable root filesystem")
    if user["uid"] != context.get("runAsUser", user["uid"]) or user["gid"] != context.get("runAsGroup", user["gid"]):
        wrong.append(f"user {user['uid']}:{user['gid']}")
    if "fsGroup" in context and context["fsGroup"] not in user.get("additionalGids", []):
        wrong.append(f"no supplementary group {context['fsGroup']}")
    if own.get("capabilities", {}).get("drop") == ["ALL"] and any(oci["process"].get("capabilities", {}).values()):
        wrong.append("capabilities left")
    if own.get("allowPrivilegeEscalation") is False and oci["process"].get("noNewPrivileges") is not True:
        wrong.append("privilege escalation allowed")
    if wrong:
        raise Failure(f"{label}: podman ran it with {', '.join(wrong)}")


def check_report(stage, label, pod, container, shard):
    """run, backfill: the report in its emptyDir, its shard (`shard`, else as the args say), its run in the
    database, Apple's answers."""
    arguments, report = container["args"], report_dir(container)
    if report is None:
        raise Failure(f"{label}: {arguments[0]} with no --report-dir: its report would go to the read-only root")
    summary = read_summary(stage, label, pod, container, report)
    if shard is None and "--shard" in arguments:
        shard = arguments[arguments.index("--shard") + 1]
    row = stage.sql("SELECT kind, status, coalesce(shard, '') FROM iap.reconciliation_runs "
                    f"WHERE id = {int(summary['runId'])}")
    if not row:
        raise Failure(f"{label}: its report names run {summary['runId']}, which iap.reconciliation_runs does not hold")
    kind, status, run_shard = row.split("|")
    if summary.get("shard") != shard or run_shard != (shard or "") or status != "completed":
        raise Failure(f"{label}: should run shard {shard}, its run {summary['runId']} ran shard {summary.get('shard')} "
                      f"(iap.reconciliation_runs: {kind}, {status}, shard '{run_shard}')")
    # The shared secret is in no environment: accounts the simulator verified show it was read from the file
    # (a wrong one is exit 2); App Store Server API requests, that the key was (each request is signed with it).
    if summary["accountsVerified"] == 0:
        raise Failure(f"{label}: verified no account, so the shared secret of the Secret volume went untried")
    if not any(endpoint.startswith("history/") for endpoint in summary.get("apiRequests", {})):
        raise Failure(f"{label}: asked the App Store Server API for no account's history, so the key went untried")
    return (f"{kind} run {summary['runId']}" + (f", shard {shard}" if shard else "")
            + f", {summary['accountsVerified']} accounts verified, report {report}/summary.md")


def check_answers(stage, label):
    """answer-consumption-requests: the CONSUMPTION_REQUEST of the stage answered (signed with the mounted key)."""
    answers = stage.sql("SELECT account_id, outcome, coalesce(http_status, 0) FROM iap.consumption_answers ORDER BY id")
    if answers != f"{CONSUMPTION_ACCOUNT}|sent|202":
        raise Failure(f"{label}: the consumption request was not answered (iap.consumption_answers: {answers or 'empty'})")
    return f"{CONSUMPTION_ACCOUNT}'s consumption request answered, Apple's stand-in took it (202)"


def read_summary(stage, label, pod, container, report):
    """summary.json of a report written into an emptyDir, read from podman's volume once the pod ended."""
    mounts = [m for m in container.get("volumeMounts", [])
              if report == m["mountPath"] or report.startswith(m["mountPath"].rstrip("/") + "/")]
    mount = max(mounts, key=lambda m: len(m["mountPath"])) if mounts else None
    if not mount or "emptyDir" not in next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]):
        raise Failure(f"{label}: its report {report} is not on an emptyDir volume")
    top = stage.podman("volume", "inspect", "--format", "{{.Mountpoint}}", mount["name"]).stdout.strip()
    directory = os.path.join(top, os.path.relpath(report, mount["mountPath"]))
    for name in ("summary.md", "summary.json"):
        if not os.path.isfile(os.path.join(directory, name)):
            there = ", ".join(sorted(os.listdir(top))) or "nothing"
            raise Failure(f"{label}: no {report}/{name} in its volume {mount['name']} ({there} there)")
    with open(os.path.join(directory, "summary.json")) as handle:
        return json.load(handle)


def last_lines(stage, name, count=8):
    logs = subprocess.run(["podman", "logs", "--tail", str(count), name], env=stage.environment,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout.rstrip()
    return "; its last log lines:\n    " + "\n    ".join(logs.split("\n")) if logs else "; it logged nothing"


def play(stage, paths):
    """Plays the pods of `paths`, an Indexed Job's together: the lines of the pods that passed."""
    groups = {}
    for pod in pods_to_play(paths):
        groups.setdefault(id(pod[1]), []).append(pod)
    lines = []
    for group in groups.values():
        began = time.monotonic()
        for line in play_group(stage, group):
            print(f"  {line} ({time.monotonic() - began:.0f} s)")
            lines.append(line)
    return lines


def print_changes(stage):
    print("check-manifests --play: each pod template run as a Pod by `podman kube play`; what differs from the manifests:")
    for what, why, _ in change_list(stage):
        print(f"  - {what} ({why})")
    print("  Secrets: receipt-reconciler (envFrom, unchanged) a podman secret of "
          + ", ".join(sorted(stage.secrets["receipt-reconciler"])) + "; receipt-reconciler-files: "
          + ", ".join(sorted(stage.secrets["receipt-reconciler-files"])) + " (the shared secret in no environment)")


def self_test(stage, backfill_path):
    """The backfill Job's pod unbroken, then broken twice: the unbroken must pass, each broken one fail with the
    job's exit 2 (configuration: the secret refused, or not there)."""
    with open(backfill_path) as handle:
        original = yaml.safe_load(handle)

    def secret_volume(pod):
        return next(v for v in pod["volumes"] if "secret" in v)

    def secret_mount(pod):
        return next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == secret_volume(pod)["name"])

    breakages = {
        "the secret volume's defaultMode 0444 (world-readable)":
            lambda pod: secret_volume(pod)["secret"].update(defaultMode=0o444),
        "the secret volume mounted at /run/secrets/receipt-reconciler-files":
            lambda pod: secret_mount(pod).update(mountPath="/run/secrets/receipt-reconciler-files"),
    }
    failures = []
    for label, breaking in [("unbroken", None)] + list(breakages.items()):
        document = copy.deepcopy(original)
        if breaking:
            breaking(document["spec"]["template"]["spec"])
        path = os.path.join(stage.work, "backfill-copy.yaml")
        with open(path, "w") as handle:
            yaml.safe_dump(document, handle)
        print(f"==> {label}")
        try:
            play(stage, [path])
            if breaking:
                failures.append(f"--play passed with {label}")
        except Failure as failure:
            print("  --play failed: " + str(failure).replace("\n", "\n  "))
            if not breaking:
                failures.append("the unbroken manifest failed")
            elif ": exit 2;" not in str(failure):
                failures.append(f"with {label}, --play failed otherwise than by the job's exit 2 (configuration)")
    return failures


def main(manifests, self_testing):
    if os.geteuid() != 0:
        print("check-manifests --play: run it as root (rootful podman, where scripts/image put the image; "
              "the secret files are root's)", file=sys.stderr)
        return 1
    if shutil.which("catatonit") is None:
        print("check-manifests --play: installing catatonit (the pod's infra container runs it)")
        quiet = {"stdout": subprocess.DEVNULL, "env": dict(os.environ, DEBIAN_FRONTEND="noninteractive"), "check": True}
        subprocess.run(["apt-get", "update", "-qq"], **quiet)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "catatonit"], **quiet)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    began = time.monotonic()
    stage = Stage()
    try:
        stage.open()
        print_changes(stage)
        if self_testing:
            failures = self_test(stage, manifests[-1])
            if failures:
                print("check-manifests --play --self-test: not as expected: " + "; ".join(failures), file=sys.stderr)
                return 1
            print("check-manifests --play --self-test: each broken pod failed, the unbroken passed "
                  f"({time.monotonic() - began:.0f} s)")
            return 0
        lines = play(stage, manifests)
        print(f"check-manifests --play: {len(lines)} pods ran as Kubernetes would run them "
              f"({time.monotonic() - began:.0f} s)")
        return 0
    except (Failure, subprocess.CalledProcessError) as error:
        print(f"check-manifests --play: {error}", file=sys.stderr)
        return 1
    finally:
        stage.close()
