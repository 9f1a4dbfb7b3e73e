"""`scripts/check-manifests --play`: the pod templates of cron/ run as Kubernetes runs them.

Each pod template becomes a Pod run by `podman kube play` with the image scripts/image built
(localhost/receipt-reconciler:latest), against a throwaway PostgreSQL and the Apple simulator, both
on this host, init containers included (run first, in order, the main container only after them):

1. A first night on a database never migrated: the verifyReceipt-only nightly's pods of completion
   indexes 0 and 1, together. Their `migrate` init containers migrate it at once (one applies every
   migration, the other waits on its lock and finds nothing left), then their runs find no account.
   Nothing else migrates the database: between them the init containers' logs name every migration
   iap.schema_migrations records, each once. One role, as in a first set-up: the Secret's
   DATABASE_URL owns the schema. Without the key, as that manifest is for (a first night with it
   reads 30 days of Apple's notification history, some 50 s at the sandbox's budget split 4 ways).
2. Then, 30 demo accounts seeded, the job as a role of its own
   (docs/adoption.md, "A role of its own": granted only what that page grants; the owner's DATABASE_URL in the Secret
   receipt-reconciler-migrate, which only the init containers read, so a migrate that ignored it
   would be refused by PostgreSQL): the nightly CronJob's Indexed Job, pods 0 and 1 together, each
   running its own shard (0/4, 1/4: the summary.json and iap.reconciliation_runs say so) and writing
   its report under /reports/INDEX; the verifyReceipt-only nightly's pod 2 (shard 2/4) with Secrets
   that hold no App Store setting and no key, which verifies its accounts asking the App Store
   Server API nothing; each manifest's notifications CronJob (`backfill --notifications-only`,
   which after the night finds no account due); the answering CronJob (answer-consumption-requests); the backfill Job,
   writing /reports/backfill; and the explain pod as docs/operating.md's `kubectl run` makes it (its
   own `$(sed ...)` run to make the overrides, which must be JSON, merged as kubectl merges them),
   whose log must be the account's.

Every container, init containers too, must exit 0 on a read-only root filesystem, as user 10001; the
pods with a Secret volume read the shared secret (and the App Store Connect key) from it, laid out as
the kubelet lays it out (root's, group fsGroup, defaultMode plus group read): the shared secret is
not in the environment, so a run whose accounts the simulator verified read it from the file. Each
report must land in its emptyDir.

What differs from the manifests is what Kubernetes or Apple would supply, all of it in one place,
change_list() below, and printed on every run. Seeded, the database is as after an earlier night in
one way: Apple's notification history read until a day ago; a CONSUMPTION_REQUEST of a consenting
customer waits.

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
  refused here. Several envFrom, an `optional` one missing, podman 4.3 takes as Kubernetes does
  (the last source wins; a missing optional one is skipped);
- an init container is removed once it ran, its exit status and log with it (Kubernetes keeps its
  status): the annotation io.podman.annotations.init.container.type "always" keeps it (it would run
  again at every start of the pod; a played pod starts once). `kube play` returns only once the init
  containers ended (with an error when one failed, the main container never started), so the pods
  of a group are played each by its own `kube play`, at once, as a Job's pods start;
- `kube play` takes no --ulimit: the open-file limit goes into a containers.conf made from
  image/containers.conf; the pod's infra container needs catatonit (installed when missing). Every run and the
  answering job push their metrics to a Pushgateway on this host (prometheus-pushgateway, installed when missing,
  in memory), where METRICS_PUSH_URL is pointed: each pod's group must hold its status.

`scripts/check-manifests --play --self-test` plays the first night (it migrates the database), then
runs the backfill Job's pod unbroken, then with its secret volume's defaultMode 0444, with the secret
mounted at a wrong path, and with its migrate init container without the Secret's environment: each
broken pod must fail --play with exit 2 (configuration), the last one before its backfill started.
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
import urllib.request
from datetime import datetime

import yaml

REPOSITORY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.path.join(REPOSITORY, ".build", "release", "receipt-reconciler")  # scripts/image's release build
DOCS = os.path.join(REPOSITORY, "docs", "operating.md")            # its kubectl run of the explain pod
ADOPTION = os.path.join(REPOSITORY, "docs", "adoption.md")       # its grants to the job's own role
ACCOUNTS = 30
INDEXES = (0, 1)                    # the completion indexes of an Indexed Job that are played
FIRST_NIGHT = "kubernetes-cronjob-verifyreceipt-only.yaml"  # played first, INDEXES, on a database never migrated
AGAIN_INDEX = 2                     # ... and once seeded, this index: a shard (2/4) no other played pod runs
JOB_ROLE = "receipt_reconciler_job"  # docs/adoption.md's role of its own for the job, as that page names it
ENV_SECRETS = ("receipt-reconciler", "receipt-reconciler-migrate")  # the Secrets of envFrom: podman secrets
APPLE_COMMANDS = ("run", "backfill", "answer-consumption-requests")  # the commands that ask Apple
TIMEOUT = 300                       # seconds a pod may take
SHARED_SECRET = "play-shared-secret"
PUSHGATEWAY = "/usr/bin/prometheus-pushgateway"  # Debian's prometheus-pushgateway (installed when missing)
CONSUMPTION_ACCOUNT = "acct-0000009"  # seed-demo's, holding transaction 2000000009000 (lifetime)
ROOT_CERTIFICATE = "/run/apple-simulator/root.der"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
INIT_TYPE_KEY = "io.podman.annotations.init.container.type"


class Failure(Exception):
    pass


# ---- What differs from the manifests: every change to a pod template, and why. ----

def change_list(stage, simulator=None):
    """(what, why, apply(pod, index)) for every change made to a pod template, in order."""
    simulator = simulator or stage.simulator
    apple = {
        "APPLE_PRODUCTION_URL": f"{simulator}/verifyReceipt",
        "APPLE_SANDBOX_URL": f"{simulator}/sandbox/verifyReceipt",
        "APPSTORE_API_URL": simulator,
        "APPSTORE_SANDBOX_API_URL": f"{simulator}/sandbox",
    }

    def completion_index(pod, index):
        if index is None:
            return
        for where in ("annotations", "labels"):
            pod["metadata"].setdefault(where, {})[INDEX_KEY] = str(index)
        for container in all_containers(pod):
            if not any(e["name"] == "JOB_COMPLETION_INDEX" for e in container.get("env", [])):
                container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}})

    def keep_init_containers(pod, index):
        if pod["spec"].get("initContainers"):
            pod["metadata"].setdefault("annotations", {})[INIT_TYPE_KEY] = "always"

    def expand_args(pod, index):
        for container in all_containers(pod):
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
        for container in all_containers(pod):
            for mount in container.get("volumeMounts", []):
                mount["name"] = renamed.get(mount["name"], mount["name"])

    def host_network(pod, index):
        pod["spec"]["hostNetwork"] = True

    def pushgateway(pod, index):
        for container in all_containers(pod):
            for variable in container.get("env", []):
                if variable["name"] == "METRICS_PUSH_URL":
                    variable["value"] = stage.pushgateway

    def stand_ins(pod, index):
        asking = [c for c in pod["spec"]["containers"] if c.get("args", [None])[0] in APPLE_COMMANDS]
        if not asking:
            return
        pod["spec"].setdefault("volumes", []).append(
            {"name": "apple-simulator-root", "hostPath": {"path": stage.root_certificate, "type": "File"}})
        for container in asking:
            container.setdefault("env", []).extend({"name": k, "value": v} for k, v in apple.items())
            container["args"] = container.get("args", []) + ["--apple-root-certificate", ROOT_CERTIFICATE]
            container.setdefault("volumeMounts", []).append(
                {"name": "apple-simulator-root", "mountPath": ROOT_CERTIFICATE, "readOnly": True})

    return [
        ("kind Pod, named play-JOB[-INDEX] (the explain pod: play-NAME)", "a Job's pod template runs as a Pod",
         lambda pod, index: None),
        (f"an Indexed Job's pod: annotation and label {INDEX_KEY}, env JOB_COMPLETION_INDEX from the annotation "
         "(init containers too)", "what the Job controller adds", completion_index),
        (f"a pod with init containers: annotation {INIT_TYPE_KEY}: always",
         "podman 4.3 removes an init container once it ran, its exit status and log with it; Kubernetes keeps "
         "its status", keep_init_containers),
        ("args: $(VAR) expanded from the container's environment",
         "the kubelet does it; podman 4.3 passes $(VAR) on literally", expand_args),
        ("a secret volume: a hostPath directory laid out as the kubelet lays out a Secret (..data symlink, "
         "root's files, group fsGroup, defaultMode plus group read when there is an fsGroup)",
         "podman 4.3 writes a secret volume's files 0644, whatever defaultMode and fsGroup say", secret_volumes),
        ("an emptyDir volume: named POD-VOLUME", "podman 4.3 makes one volume of that name for every pod on the host",
         empty_dirs),
        ("hostNetwork: true", "PostgreSQL and the simulator listen on this host's 127.0.0.1", host_network),
        (f"env METRICS_PUSH_URL={stage.pushgateway}", "a Pushgateway (Debian's, in memory) listens on this host",
         pushgateway),
        ("Apple's stand-ins, in the containers that ask Apple (" + ", ".join(APPLE_COMMANDS) + "): env "
         + ", ".join(f"{k}={v}" for k, v in apple.items())
         + f"; args + --apple-root-certificate {ROOT_CERTIFICATE}, the simulator's root (read-only hostPath)",
         "the simulator answers for Apple, its signed data chained to its own test root", stand_ins),
    ]


def all_containers(pod):
    """The init containers, then the containers, of a Pod."""
    return pod["spec"].get("initContainers", []) + pod["spec"]["containers"]


def pod_from_template(document, template, index, stage):
    """The Pod for one pod template (and completion index), with every change of change_list."""
    name = "play-" + template.get("metadata", {}).get("name", document["metadata"]["name"]) \
        + ("" if index is None else f"-{index}")
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


def merge_patch(target, patch):
    """RFC 7396 JSON merge patch, kubectl run's default --override-type (merge): an object is merged member
    by member, a null removes a member, anything else (a list too) replaces what was there."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def explain_pod_from_docs(path):
    """The Pod docs/operating.md's `kubectl run` creates: its NAME and --image in the Pod kubectl generates
    (kubectl's createPod: label run=NAME, one container NAME with stdin for -i, dnsPolicy, restartPolicy from
    --restart), its --overrides made by running the docs' own `$(...)` (which must name `path` and give JSON) and
    merged into it as kubectl does. Checked once against kubectl 1.32's `--dry-run=client -o json`: the same Pod."""
    with open(DOCS) as handle:
        blocks = [b for b in re.findall(r"```sh\n(.*?)```", handle.read(), flags=re.S) if "kubectl run" in b]
    if len(blocks) != 1:
        raise Failure(f"docs/operating.md shows {len(blocks)} sh blocks with `kubectl run`, not the one explain recipe")
    command = re.sub(r"\\\n\s*", " ", blocks[0]).strip()
    words = command.split()
    found = re.search(r"kubectl run (\S+) .*--image=(\S+) .*--overrides=\"\$\((.+)\)\"", command)
    missing = [flag for flag in ("--rm", "-i", "--restart=Never") if flag not in words]
    if not found or missing or "--override-type" in command:
        raise Failure("docs/operating.md's kubectl run must be `kubectl run NAME --rm -i --restart=Never --image=IMAGE "
                      "--overrides=\"$(COMMAND)\"` (kubectl's default --override-type, merge): " + command)
    name, image, make_overrides = found.groups()
    if os.path.relpath(path, REPOSITORY) not in make_overrides:
        raise Failure(f"docs/operating.md's kubectl run does not make its overrides from {os.path.relpath(path, REPOSITORY)}")
    made = subprocess.run(["bash", "-c", make_overrides], cwd=REPOSITORY, capture_output=True, text=True)
    if made.returncode != 0:
        raise Failure(f"docs/operating.md's $({make_overrides}) exited {made.returncode}: {made.stderr.strip()}")
    try:
        overrides = json.loads(made.stdout)
    except ValueError as error:
        raise Failure(f"docs/operating.md's $({make_overrides}) gives no JSON, which --overrides needs: {error}")
    generated = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"run": name}},
                 "spec": {"containers": [{"name": name, "image": image, "resources": {}, "stdin": True, "stdinOnce": True}],
                          "restartPolicy": "Never", "dnsPolicy": "ClusterFirst"}}
    return merge_patch(generated, overrides)


# ---- The stage: PostgreSQL, the simulator, the Secrets, podman's settings. ----

class Stage:
    """Everything a play needs, made once; close() removes all of it (also what a failure left)."""

    def __init__(self):
        self.cleanups = []
        self.podman_secrets = []         # the podman secrets made here, now
        self.secrets = {}

    def open(self):
        """PostgreSQL never migrated, the simulator (no scenario yet), the App Store Connect key."""
        if not os.access(BINARY, os.X_OK):
            raise Failure(f"no release binary at {BINARY}: run scripts/image first")
        self.work = tempfile.mkdtemp(prefix="receipt-reconciler-play.", dir="/tmp")
        os.chmod(self.work, 0o755)  # PostgreSQL runs as postgres from inside it
        self.cleanups.append(lambda: shutil.rmtree(self.work, ignore_errors=True))
        self.environment = dict(os.environ, CONTAINERS_CONF=self.containers_conf())
        for name in ENV_SECRETS:
            if self.podman("secret", "inspect", name, check=False).returncode == 0:
                raise Failure(f"a podman secret {name} exists already (left by an earlier --play, or another --play "
                              f"runs?): podman secret rm {name}")
        self.cleanups.append(lambda: [self.podman("secret", "rm", name, check=False) for name in self.podman_secrets])
        self.start_postgres()
        self.start_simulator()
        self.start_pushgateway()
        self.key = os.path.join(self.work, "AuthKey.p8")
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.key],
                       check=True, stderr=subprocess.DEVNULL)

    def seed(self):
        """After the first night: the demo accounts, the simulator knowing them, earlier events, the job's own role."""
        host = dict(os.environ, DATABASE_URL=self.database_url, APPLE_SHARED_SECRET=SHARED_SECRET)
        scenario = os.path.join(self.work, "api-scenario.json")
        subprocess.run([BINARY, "seed-demo", "--accounts", str(ACCOUNTS), "--api-scenario", scenario], env=host,
                       stdout=subprocess.DEVNULL, check=True)
        self.start_simulator(scenario)
        self.earlier_events()
        self.own_role()

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

    def start_simulator(self, scenario=None):
        """The simulator (again, with `scenario`, the signing chain kept: its root is the one the pods trust)."""
        if getattr(self, "simulator_process", None):
            self.simulator_process.terminate()
            self.simulator_process.wait(10)
        signing = os.path.join(self.work, "signing")
        output = open(os.path.join(self.work, "simulator.out"), "w+")
        simulator = subprocess.Popen([BINARY, "simulate-apple", "--shared-secret", SHARED_SECRET, "--signing-dir", signing]
                                     + (["--scenario", scenario] if scenario else []), stdout=output, stderr=subprocess.STDOUT)
        self.simulator_process = simulator
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

    def start_pushgateway(self):
        """A Pushgateway on this host, in memory only, where the pods' METRICS_PUSH_URL is pointed."""
        for _ in range(5):
            port = random.randint(20000, 45000)
            gateway = subprocess.Popen([PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{port}", "--persistence.file=",
                                        "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(100):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as answer:
                        if answer.status == 200:
                            self.cleanups.append(lambda: (gateway.terminate(), gateway.wait(10)))
                            self.pushgateway = f"http://127.0.0.1:{port}"
                            return
                except OSError:
                    time.sleep(0.05)
                if gateway.poll() is not None:
                    break
            gateway.terminate()
            gateway.wait(10)
        raise Failure("the Pushgateway did not start")

    def pushed(self):
        """The receipt_reconciler samples the Pushgateway holds, a line each."""
        with urllib.request.urlopen(f"{self.pushgateway}/metrics", timeout=5) as answer:
            return [line for line in answer.read().decode().split("\n") if line.startswith("receipt_reconciler_")]

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

    def own_role(self):
        """docs/adoption.md's role of its own for the job, granted what that page grants (its tested block, less
        the line for the app's triggers' table, which this database has not)."""
        if "user=postgres" not in self.database_url:
            raise Failure(f"PostgreSQL's address names no user=postgres: {self.database_url}")
        with open(ADOPTION) as handle:
            found = re.search(r"<!-- test: grant-runtime-role -->\s*```sql\n(.*?)```", handle.read(), flags=re.S)
        if not found or JOB_ROLE not in found.group(1):
            raise Failure(f"docs/adoption.md has no block <!-- test: grant-runtime-role --> granting {JOB_ROLE}")
        self.sql(f"CREATE ROLE {JOB_ROLE} LOGIN")
        for statement in re.sub(r"--[^\n]*", "", found.group(1)).split(";"):
            if statement.strip() and "public." not in statement:
                self.sql(statement)
        self.job_database_url = self.database_url.replace("user=postgres", f"user={JOB_ROLE}")

    def use_secrets(self, keyed, own_role):
        """The Secrets of docs/operating.md ("The manifests") the next pods see, as `data`, the shared secret only as
        a file: with the App Store Connect key and settings (`keyed`) or none of them; DATABASE_URL the owner's, or
        (`own_role`) the job's own role's, the owner's then in receipt-reconciler-migrate. The Secrets of envFrom are
        podman secrets, in podman 4.3's form: the Secret's `data` as a JSON object of base64 values."""
        environment = {"DATABASE_URL": self.job_database_url if own_role else self.database_url}
        files = {"shared-secret": SHARED_SECRET.encode()}
        if keyed:
            environment.update(APPSTORE_ISSUER_ID="play-issuer", APPSTORE_KEY_ID="PLAYKEY001",
                               APPSTORE_BUNDLE_ID="com.example.app", APPSTORE_APP_APPLE_ID="1234567890")
            with open(self.key, "rb") as handle:
                files["AuthKey.p8"] = handle.read()
        secrets = {"receipt-reconciler": {k: v.encode() for k, v in environment.items()}, "receipt-reconciler-files": files}
        if own_role:
            secrets["receipt-reconciler-migrate"] = {"DATABASE_URL": self.database_url.encode()}
        for name in ENV_SECRETS:
            if name in self.podman_secrets:
                self.podman("secret", "rm", name)
                self.podman_secrets.remove(name)
            if name in secrets:
                path = os.path.join(self.work, f"secret-{name}.json")
                with open(path, "w") as handle:
                    json.dump({k: base64.b64encode(v).decode() for k, v in secrets[name].items()}, handle)
                self.podman("secret", "create", name, path)
                self.podman_secrets.append(name)
        self.secrets = secrets


# ---- Playing the pods. ----

def pods_of(path, indexes=INDEXES):
    """The groups of pods --play runs of one manifest file, a group per document (an Indexed Job's pods of
    `indexes` together, each of shard INDEX/COMPLETIONS; the shard of any other: as its args say), each pod as
    (label, document, template, index, shard)."""
    name = os.path.basename(path)
    if name.endswith(".json"):
        pod = explain_pod_from_docs(path)
        return [[(f"{name} Pod/{pod['metadata']['name']}, as docs/operating.md's kubectl run makes it",
                  pod, pod, None, None)]]
    groups = []
    with open(path) as handle:
        for document in yaml.safe_load_all(handle):
            if not document or document.get("kind") not in ("CronJob", "Job"):
                continue
            job = document["spec"]["jobTemplate"]["spec"] if document["kind"] == "CronJob" else document["spec"]
            where = f"{name} {document['kind']}/{document['metadata']['name']}"
            if job.get("completionMode") == "Indexed":
                groups.append([(f"{where} index {i}", document, job["template"], i, f"{i}/{job['completions']}")
                               for i in indexes])
            else:
                groups.append([(where, document, job["template"], None, None)])
    return groups


def keyed(template):
    """Whether a pod template names the App Store Connect key: else it is played with Secrets holding no App Store
    setting and no key, as an adopter without a key has them."""
    return any(e.get("name") == "APPSTORE_PRIVATE_KEY_FILE"
               for c in template["spec"]["containers"] for e in c.get("env", []))


def refuse_what_podman_gets_wrong(pod, stage):
    """What --play cannot run as Kubernetes would, and what of it is left on this host (a pod or an emptyDir volume
    of the same name: podman would take it up), refused before anything runs, so that nothing but --play's is removed."""
    name = pod["metadata"]["name"]
    if len(pod["spec"]["containers"]) != 1:
        raise Failure(f"{name}: --play plays pods of one container (and any init containers)")
    for container in all_containers(pod):
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


def play_group(stage, group, seeded=True):
    """Runs the pods of one group at once, each by its own `kube play` (which returns once its init containers
    ended), as a Job's pods start; then checks each: the lines of the pods that passed, and the migrations their
    init containers applied."""
    started = []
    try:
        for label, document, template, index, shard in group:
            pod = pod_from_template(document, template, index, stage)
            refuse_what_podman_gets_wrong(pod, stage)
            path = os.path.join(stage.work, "pods", pod["metadata"]["name"] + ".yaml")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                yaml.safe_dump(pod, handle, sort_keys=False)
            playing = subprocess.Popen(["podman", "kube", "play", "--quiet", path], env=stage.environment,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            started.append((label, pod, shard, playing))
        for label, pod, _, playing in started:
            try:
                _, error = playing.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                playing.kill()
                raise Failure(f"{label}: podman kube play still running after {TIMEOUT} s (its init containers?)")
            if playing.returncode != 0:
                failed_init_container(stage, label, pod)
                raise Failure(f"{label}: podman kube play: {error.strip()}")
        checked = [check_pod(stage, label, pod, shard, seeded) for label, pod, shard, _ in started]
        reports = [report_dir(pod["spec"]["containers"][0]) for _, pod, _, _ in started]
        if None not in reports and len(set(reports)) < len(reports):
            labels = ", ".join(label for label, _, _, _ in started)
            raise Failure(f"{labels}: the pods of one Job write the same report directory")
        return [line for line, _ in checked], [version for _, applied in checked for version in applied]
    finally:
        for _, pod, _, playing in started:
            if playing.poll() is None:
                playing.kill()
                playing.wait()
            remove_pod(stage, pod)


def failed_init_container(stage, label, pod):
    """When `kube play` failed: the init container that failed, as a Failure (its exit status and last lines)."""
    for container in pod["spec"].get("initContainers", []):
        name = f"{pod['metadata']['name']}-{container['name']}"
        inspected = stage.podman("container", "inspect", name, check=False)
        if inspected.returncode == 0:
            code = json.loads(inspected.stdout)[0]["State"]["ExitCode"]
            if code != 0:
                raise Failure(f"{label} (pod {pod['metadata']['name']}): init container {container['name']}: exit {code}"
                              f"{last_lines(stage, name)}\n  (the main container never started)")


def remove_pod(stage, pod):
    stage.podman("pod", "rm", "--force", pod["metadata"]["name"], check=False)
    for volume in pod["spec"].get("volumes", []):
        if "emptyDir" in volume:
            stage.podman("volume", "rm", "--force", volume["name"], check=False)


def report_dir(container):
    arguments = container["args"]
    return arguments[arguments.index("--report-dir") + 1] if "--report-dir" in arguments else None


def check_pod(stage, label, pod, shard, seeded):
    """Each container's exit and security as run, the init containers' first, then what the main container's
    command did: (the line of a pod that passed, the migrations its init containers applied)."""
    container = pod["spec"]["containers"][0]
    name = f"{pod['metadata']['name']}-{container['name']}"
    label = f"{label} (pod {pod['metadata']['name']})"
    try:
        stage.podman("wait", name, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failure(f"{label}: still running after {TIMEOUT} s{last_lines(stage, name)}")
    applied, done = [], []
    for init in pod["spec"].get("initContainers", []):
        versions = check_init_container(stage, label, pod, init, f"{pod['metadata']['name']}-{init['name']}")
        applied += versions
        done.append(f"{init['name']} " + (f"applied {len(versions)} migrations" if versions else "found nothing to do")
                    if init["args"][0] == "migrate" else f"{init['name']} exit 0")
    state = json.loads(stage.podman("container", "inspect", name).stdout)[0]
    if state["State"]["ExitCode"] != 0:
        raise Failure(f"{label}: exit {state['State']['ExitCode']}{last_lines(stage, name)}")
    with open(state["OCIConfigPath"]) as handle:
        check_security(label, pod, container, json.load(handle))
    command = container["args"][0]
    if command == "answer-consumption-requests":
        did = check_answers(stage, label)
    elif command == "explain":
        did = check_explain(stage, label, container, name)
    else:
        did = check_report(stage, label, pod, container, shard, seeded)
    return f"{label}: " + "".join(f"init {d}, " for d in done) + f"exit 0, {did}", applied


def check_init_container(stage, label, pod, container, name):
    """An init container as it ran (kept by the annotation): exit 0, its security, and the migrations it applied
    (its log's migration.apply lines), which it must have applied before the main container started."""
    state = json.loads(stage.podman("container", "inspect", name).stdout)[0]
    if state["State"]["ExitCode"] != 0:
        raise Failure(f"{label}: init container {container['name']}: exit {state['State']['ExitCode']}"
                      f"{last_lines(stage, name)}")
    with open(state["OCIConfigPath"]) as handle:
        check_security(f"{label}, init container {container['name']}", pod, container, json.load(handle))
    main = json.loads(stage.podman("container", "inspect", f"{pod['metadata']['name']}-"
                                   f"{pod['spec']['containers'][0]['name']}").stdout)[0]
    if not datetime.fromisoformat(state["State"]["FinishedAt"]) <= datetime.fromisoformat(main["State"]["StartedAt"]):
        raise Failure(f"{label}: its main container started ({main['State']['StartedAt']}) before init container "
                      f"{container['name']} ended ({state['State']['FinishedAt']})")
    logs = subprocess.run(["podman", "logs", name], env=stage.environment, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True).stdout
    applied = []
    for line in logs.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("message") == "migration.apply":
            applied.append(entry["migration.version"])
    return applied


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


def check_report(stage, label, pod, container, shard, seeded):
    """run, backfill: the report in its emptyDir, its shard (`shard`, else as the args say), its run in the
    database, Apple's answers: with the key, accounts verified and the App Store Server API asked; without it,
    accounts verified (once `seeded`) and the API asked nothing."""
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
    # The notifications CronJob verifies only the accounts new notifications made due: after the night, none.
    notifications_only = "--notifications-only" in arguments
    if seeded and not notifications_only and summary["accountsVerified"] == 0:
        raise Failure(f"{label}: verified no account, so the shared secret of the Secret volume went untried")
    asked = summary.get("apiRequests") or {}
    if keyed(pod) and not notifications_only and not any(endpoint.startswith("history/") for endpoint in asked):
        raise Failure(f"{label}: asked the App Store Server API for no account's history, so the key went untried")
    if not keyed(pod) and asked:
        raise Failure(f"{label}: without the key, asked the App Store Server API: {', '.join(sorted(asked))}")
    # Its metrics were pushed where the manifest says (METRICS_PUSH_URL): its group holds its status.
    group = [f'kind="{kind}"', 'status="completed"'] + ([f'shard="{shard.replace("/", "_of_")}"'] if shard else [])
    if not any(line.startswith("receipt_reconciler_last_run_status{") and all(label in line for label in group)
               and (shard or "shard=" not in line) and line.endswith(" 1") for line in stage.pushed()):
        raise Failure(f"{label}: its metrics did not reach the Pushgateway (no last_run_status of {', '.join(group)})")
    return (f"{kind} run {summary['runId']}" + (f", shard {shard}" if shard else "")
            + f", {summary['accountsVerified']} accounts verified"
            + ("" if keyed(pod) else ", the App Store Server API asked nothing") + f", report {report}/summary.md")


def check_answers(stage, label):
    """answer-consumption-requests: the CONSUMPTION_REQUEST of the stage answered (signed with the mounted key)."""
    answers = stage.sql("SELECT account_id, outcome, coalesce(http_status, 0) FROM iap.consumption_answers ORDER BY id")
    if answers != f"{CONSUMPTION_ACCOUNT}|sent|202":
        raise Failure(f"{label}: the consumption request was not answered (iap.consumption_answers: {answers or 'empty'})")
    if not any(line.startswith("receipt_reconciler_consumption_last_run_timestamp_seconds{")
               and 'kind="answer_consumption_requests"' in line for line in stage.pushed()):
        raise Failure(f"{label}: its metrics did not reach the Pushgateway (METRICS_PUSH_URL)")
    return f"{CONSUMPTION_ACCOUNT}'s consumption request answered, Apple's stand-in took it (202)"


def check_explain(stage, label, container, name):
    """explain ACCOUNT: what it printed is the account's (a seeded one: explain exits 1 on an unknown one)."""
    account = container["args"][1]
    logs = subprocess.run(["podman", "logs", name], env=stage.environment, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True).stdout
    if not logs.startswith(f"Account {account}, as of "):
        raise Failure(f"{label}: its log does not begin with `Account {account}, as of`{last_lines(stage, name)}")
    return f"explain {account}: its log is the account's ({len(logs.splitlines())} lines)"


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


def play_groups(stage, groups, seeded=True, own_role=True):
    """Plays `groups` in order, each with the Secrets its pods call for: the lines of the pods that passed, and
    the migrations their init containers applied."""
    lines, applied = [], []
    for group in groups:
        began = time.monotonic()
        stage.use_secrets(keyed=keyed(group[0][2]), own_role=own_role)
        group_lines, group_applied = play_group(stage, group, seeded)
        for line in group_lines:
            print(f"  {line} ({time.monotonic() - began:.0f} s)")
        lines += group_lines
        applied += group_applied
    return lines, applied


def first_night(stage, path):
    """The first night on a database never migrated (docstring of this file, 1.): the verifyReceipt-only nightly's
    pods of INDEXES, with one role; their init containers must have applied every migration, each once."""
    print(f"==> a first night, on a database never migrated: {os.path.basename(path)}, one role, no key")
    if stage.sql("SELECT to_regnamespace('iap') IS NULL") != "t":
        raise Failure("the database of the first night has a schema iap already")
    groups = [group for group in pods_of(path) if group[0][3] is not None]  # the night; its notifications CronJob plays in 2.
    if len(groups) != 1 or keyed(groups[0][0][2]):
        raise Failure(f"{os.path.basename(path)} must hold one Indexed Job, without the key")
    lines, applied = play_groups(stage, groups, seeded=False, own_role=False)
    recorded = sorted(stage.sql("SELECT version FROM iap.schema_migrations").split())
    if not recorded or sorted(applied) != recorded:
        raise Failure("the init containers did not migrate the database alone, each migration once: they applied "
                      f"{len(applied)} ({len(set(applied))} distinct), iap.schema_migrations records {len(recorded)}")
    line = f"the init containers applied the {len(recorded)} migrations iap.schema_migrations records, each once"
    print(f"  {line}")
    return lines + [line]


def play(stage, paths):
    """Seeded, the job as a role of its own (docstring of this file, 2.): every pod of `paths`, the first night's
    manifest at AGAIN_INDEX."""
    print(f"==> seeded ({ACCOUNTS} accounts); DATABASE_URL the job's own role, {JOB_ROLE}, the owner's in "
          "receipt-reconciler-migrate")
    groups = [group for path in paths
              for group in pods_of(path, (AGAIN_INDEX,) if os.path.basename(path) == FIRST_NIGHT else INDEXES)]
    lines, _ = play_groups(stage, groups)
    return lines


def print_changes(stage):
    print("check-manifests --play: each pod template run as a Pod by `podman kube play`; what differs from the manifests:")
    for what, why, _ in change_list(stage, simulator="http://127.0.0.1:PORT"):
        print(f"  - {what} ({why})")
    print("  Secrets: receipt-reconciler (envFrom, unchanged: a podman secret) of DATABASE_URL, with the key also "
          "APPSTORE_APP_APPLE_ID, APPSTORE_BUNDLE_ID, APPSTORE_ISSUER_ID, APPSTORE_KEY_ID; receipt-reconciler-files of "
          "shared-secret, with the key also AuthKey.p8 (the shared secret in no environment); "
          "receipt-reconciler-migrate (envFrom of the init containers, optional) of the owner's DATABASE_URL "
          "when the job runs as its own role")


def self_test(stage, backfill_path):
    """The backfill Job's pod unbroken, then broken thrice: the unbroken must pass, each broken one fail with the
    job's exit 2 (configuration: the secret refused, or not there; migrate without DATABASE_URL)."""
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
        "the migrate init container without the Secret's environment (no DATABASE_URL)":
            lambda pod: pod["initContainers"][0].pop("envFrom"),
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
            play_groups(stage, pods_of(path))
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
    if not os.access(PUSHGATEWAY, os.X_OK):
        print("check-manifests --play: installing prometheus-pushgateway (the manifests push their metrics to one)")
        quiet = {"stdout": subprocess.DEVNULL, "env": dict(os.environ, DEBIAN_FRONTEND="noninteractive"), "check": True}
        subprocess.run(["apt-get", "update", "-qq"], **quiet)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus-pushgateway"], **quiet)
    if shutil.which("catatonit") is None:
        print("check-manifests --play: installing catatonit (the pod's infra container runs it)")
        quiet = {"stdout": subprocess.DEVNULL, "env": dict(os.environ, DEBIAN_FRONTEND="noninteractive"), "check": True}
        subprocess.run(["apt-get", "update", "-qq"], **quiet)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "catatonit"], **quiet)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    began = time.monotonic()
    by_name = {os.path.basename(path): path for path in manifests}
    stage = Stage()
    try:
        stage.open()
        print_changes(stage)
        lines = first_night(stage, by_name[FIRST_NIGHT])
        stage.seed()
        if self_testing:
            failures = self_test(stage, by_name["kubernetes-backfill-job.yaml"])
            if failures:
                print("check-manifests --play --self-test: not as expected: " + "; ".join(failures), file=sys.stderr)
                return 1
            print("check-manifests --play --self-test: each broken pod failed, the unbroken passed "
                  f"({time.monotonic() - began:.0f} s)")
            return 0
        lines += play(stage, manifests)
        pods = sum(1 for line in lines if "(pod play-" in line)
        print(f"check-manifests --play: {pods} pods ran as Kubernetes would run them "
              f"({time.monotonic() - began:.0f} s)")
        return 0
    except (Failure, subprocess.CalledProcessError) as error:
        print(f"check-manifests --play: {error}", file=sys.stderr)
        return 1
    finally:
        stage.close()
