"""What run_script's jobs are handed and what comes back: every secret a job was handed, however it was chosen (the
call, or the script's [tool.hf-jobs] header), is masked in every log path on either backend; a job on this machine
gets the server's token only when the call names it; a project folder leaves credential files home and says
which; a script URL is fetched from the very address that was checked."""

import json
import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.user_scripts import urls as script_urls
from hf_train_mcp.access import Access
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.errors import HubError, TrainError
from tests.conftest import WRITE_TOKEN
from tests.emulator import Emulator, JobPlan
from tests.helpers import call, call_once, finished

pytestmark = pytest.mark.anyio

DSN = "postgres://admin:s3cr3t-canary@db.internal:5432/prod"
HEADER_PICKS = '''# /// script
# dependencies = []
#
# [tool.hf-jobs]
# secrets = ["DATABASE_URL"]
# ///
import os
print("connecting to", os.environ.get("DATABASE_URL"), flush=True)
print("token given:", bool(os.environ.get("HF_TOKEN")), flush=True)
raise ConnectionError("could not reach " + os.environ.get("DATABASE_URL", "nothing"))
'''
QUICK = dict(scheduling_s=0.0, running_s=0.2)


def shown(*answers: object) -> str:
    return json.dumps(answers, default=str)


# --- 17: a header's secrets are masked like the call's -----------------------------------------------------------
async def test_a_secret_the_header_picked_is_masked_in_every_log_path_on_jobs(hub: Emulator,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", DSN)  # not a credential's name: masked because the job was handed it
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK, final_stage="ERROR", message="exited with code 1",
                          log_lines=[f"connecting to {DSN}", "Traceback (most recent call last):",
                                     f"ConnectionError: could not reach {DSN}"]))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": HEADER_PICKS})
        report = await finished(client, job["job_id"], 30)
        logs = await call(client, "job_logs", {"job_id": job["job_id"]})
        resource = (await client.read_resource(f"hf-train://jobs/{job['job_id']}")).contents[0].text
    assert hub.posted_jobs()[before]["secrets"] == {"HF_TOKEN": WRITE_TOKEN, "DATABASE_URL": DSN}  # it was handed
    assert "s3cr3t-canary" not in shown(report, logs, resource)
    assert "connecting to ***" in report["log_tail"] and "connecting to ***" in logs["lines"]
    assert report["stage"] == "ERROR" and "could not reach ***" in report["error"]


@pytest.mark.detached
async def test_a_secret_the_header_picked_is_masked_in_a_local_runs_logs(offline, monkeypatch: pytest.MonkeyPatch
                                                                         ) -> None:
    monkeypatch.setenv("DATABASE_URL", DSN)
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": HEADER_PICKS, "backend": "local"})
        report = await finished(client, job["job_id"], 120)
        logs = await call(client, "job_logs", {"job_id": job["job_id"]})
    assert report["stage"] == "ERROR", report
    assert "s3cr3t-canary" not in shown(report, logs)
    assert "connecting to ***" in report["log_tail"] and "could not reach ***" in report["error"]


# --- a multi-line secret (a key) and an escaped one (repr, JSON) are masked too ------------------------------------
SSH_KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAACANARYLINE1\nQyNTUxOQAAACBmZXRjaCANARYLINE2xx\n"
           "-----END OPENSSH PRIVATE KEY-----")
QUOTED = "p4ss'w0rd\\canary-\u00e9"  # a quote, a backslash and an accent: repr() and JSON escape them
PRINTS = ("import json, os\nprint(os.environ['DEPLOY_SSH_KEY'], flush=True)\nprint(repr(os.environ['DB_PASSWORD']))\n"
          "print(json.dumps({'k': os.environ['DEPLOY_SSH_KEY'], 'p': os.environ['DB_PASSWORD']}), flush=True)\n")


def unmasked(text: str) -> list[str]:
    return [piece for piece in ("CANARYLINE1", "CANARYLINE2", "w0rd", "canary") if piece in text]


@pytest.mark.detached
async def test_a_multi_line_or_escaped_secret_is_masked_on_this_machine(offline, monkeypatch: pytest.MonkeyPatch
                                                                        ) -> None:
    monkeypatch.setenv("DEPLOY_SSH_KEY", SSH_KEY)
    monkeypatch.setenv("DB_PASSWORD", QUOTED)
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": PRINTS, "backend": "local",
                                                "secrets": ["DEPLOY_SSH_KEY", "DB_PASSWORD"]})
        report = await finished(client, job["job_id"], 120)
        logs = await call(client, "job_logs", {"job_id": job["job_id"]})
    assert report["stage"] == "COMPLETED", report
    assert len(logs["lines"]) >= 6 and not unmasked(shown(report, logs)), logs["lines"]


async def test_a_multi_line_secret_is_masked_on_jobs(hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_SSH_KEY", SSH_KEY)
    printed = [*SSH_KEY.splitlines(), repr(SSH_KEY), json.dumps({"k": SSH_KEY})]
    hub.plan_next(JobPlan(**QUICK, log_lines=printed))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": PRINTS, "secrets": ["DEPLOY_SSH_KEY"]})
        report = await finished(client, job["job_id"], 30)
        logs = await call(client, "job_logs", {"job_id": job["job_id"]})
    assert len(logs["lines"]) >= len(printed) and not unmasked(shown(report, logs)), logs["lines"]


# --- 18: a local job gets the server's token only when the call names it -----------------------------------------
TOKEN_PROBE = "import os\nprint('token given:', bool(os.environ.get('HF_TOKEN')), flush=True)\n"


@pytest.mark.detached
async def test_a_local_script_gets_the_servers_token_only_when_named(offline, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_server_token_canary_0123")
    async with Client(build_server()) as client:
        plain = await call(client, "run_script", {"script": TOKEN_PROBE, "backend": "local"})
        named = await call(client, "run_script", {"script": TOKEN_PROBE, "backend": "local", "secrets": ["HF_TOKEN"]})
        unnamed = await finished(client, plain["job_id"], 120)
        given = await finished(client, named["job_id"], 120)
    assert "token given: False" in unnamed["log_tail"], unnamed
    assert "token given: True" in given["log_tail"], given
    assert "hf_server_token_canary_0123" not in shown(unnamed, given)


async def test_a_urls_header_does_not_hand_a_local_run_the_token(offline, served, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_server_token_canary_0123")
    files, base = served
    files["/t.py"] = b"# /// script\n# [tool.hf-jobs]\n# secrets = [\"HF_TOKEN\"]\n# ///\nprint(1)\n"
    refused = await call_once("run_script", {"script": base + "/t.py", "backend": "local", "dry_run": True})
    assert refused.is_error and "secrets=[...]" in refused.content[0].text


# --- 21: a project folder's credentials stay home, and the answer says which --------------------------------------
CREDENTIALS = [".git-credentials", ".huggingface/token", ".docker/config.json", ".kube/config",
               ".config/gcloud/application_default_credentials.json", "conf/application_default_credentials.json",
               "keys/id_rsa", "keys/id_ed25519", "deploy_key_rsa", "tls/server.key", "tls/bundle.p12", "tls/bundle.pfx",
               "credentials.json", "prod.env", ".env.local", "infra/terraform.tfstate", "infra/.terraform/plugin",
               "notes/backup-of-my-key"]  # the last: a private key under a name no pattern knows
KEPT = ["train.py", "conf/run.yaml", "src/keys.py", "envs/base.yaml", "README.md"]


def credential_project(root: Path) -> Path:
    for name in [*CREDENTIALS, *KEPT]:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("print('train')\n" if name.endswith(".py") else f"SECRET-CANARY in {name}\n")
    (root / "notes/backup-of-my-key").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXkt\n"
                                                 "-----END OPENSSH PRIVATE KEY-----\n")
    return root


async def synced(hub: Emulator, project: Path) -> tuple[set[str], str]:
    """The files of the project folder a Jobs run_script uploaded to its bucket, and the answer's warnings."""
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK))
    job = await call_once("run_script", {"folder": str(project), "script": "train.py"})
    assert not job.is_error, job.content[0].text
    volume = hub.posted_jobs()[before]["volumes"][0]
    uploaded = {path.removeprefix(volume["path"] + "/") for path in hub.buckets[volume["source"]]["files"]}
    return uploaded, " ".join(job.structured_content["warnings"])


async def local_copy(project: Path, isolated_home: Path) -> Path:
    """The copy of the project folder a local run_script job ran in, once the job has ended."""
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"folder": str(project), "script": "train.py", "backend": "local"})
        await finished(client, job["job_id"], 120)
    return isolated_home / "jobs" / job["job_id"] / "project"


async def test_a_folders_credentials_are_not_uploaded_and_are_named(hub: Emulator, tmp_path: Path) -> None:
    project = credential_project(tmp_path / "proj")
    uploaded, said = await synced(hub, project)
    assert uploaded == set(KEPT), uploaded
    assert "left out of the folder's copy as credentials" in said and "SECRET-CANARY" not in said
    for name in ("keys/id_rsa", ".git-credentials", ".kube/", ".config/gcloud/", "notes/backup-of-my-key", "prod.env"):
        assert name in said, (name, said)


@pytest.mark.detached
async def test_a_local_copy_leaves_the_same_files_home(offline, tmp_path: Path, isolated_home: Path) -> None:
    project = credential_project(tmp_path / "proj")
    copy = await local_copy(project, isolated_home)
    copied = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()}
    assert copied == set(KEPT), copied


SERVICE_ACCOUNT = json.dumps({"type": "service_account", "project_id": "prod-123", "private_key_id": "abc",
                              "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n",
                              "client_email": "trainer@prod-123.iam.gserviceaccount.com"})
BY_CONTENT_OR_NAME = {  # what the review found uploaded: credentials by content, and names the rule did not know
    "prod-123-4f2a9c1d7e3b.json": SERVICE_ACCOUNT,  # a service-account key as the console names it
    "keys/signing.asc": "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----\n",
    "conf/defaults.json": '{"a": 1, "deploy": {"key": "-----BEGIN EC PRIVATE KEY-----\\nMHcC\\n"}}',  # deep inside
    ".pgpass": "db:5432:prod:admin:s3cr3t\n", "kaggle.json": '{"username": "me", "key": "0123"}',
    ".s3cfg": "[default]\nsecret_key = x\n", ".streamlit/secrets.toml": 'OPENAI_API_KEY = "sk"\n',
    ".cargo/credentials.toml": 'token = "cio"\n', "hf_home/token": "hf_stored\n", ".databrickscfg": "token = d\n",
    ".my.cnf": "password=s3cr3t\n", "rclone.conf": "secret_access_key = c\n", "kubeconfig.yaml": "token: k\n",
}


def linked_credentials(root: Path) -> Path:
    """Credentials by content and by name, and other names for them: a link to .env, to a file of .kube, to
    the .kube folder itself."""
    for name, text in BY_CONTENT_OR_NAME.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "train.py").write_text("print('train')\n")
    (root / "conf" / "run.yaml").write_text("lr: 1e-4\n")
    (root / ".env").write_text("OPENAI_API_KEY=sk-canary-env\n")
    (root / ".kube").mkdir()
    (root / ".kube" / "config").write_text("token: kube-canary\n")
    (root / "settings.txt").symlink_to(".env")
    (root / "conf" / "cluster.yaml").symlink_to(root / ".kube" / "config")
    (root / "k8s").symlink_to(".kube", target_is_directory=True)
    return root


LINKED_KEPT = {"train.py", "conf/run.yaml"}


async def test_credentials_by_content_or_by_another_name_stay_home_on_jobs(hub: Emulator, tmp_path: Path) -> None:
    project = linked_credentials(tmp_path / "proj")
    uploaded, said = await synced(hub, project)
    assert uploaded == LINKED_KEPT, uploaded
    for name in (*BY_CONTENT_OR_NAME, "settings.txt", "conf/cluster.yaml", "k8s/"):
        assert name in said, (name, said)


@pytest.mark.detached
async def test_a_local_copy_leaves_the_same_credentials_home(offline, tmp_path: Path, isolated_home: Path) -> None:
    project = linked_credentials(tmp_path / "proj")
    copy = await local_copy(project, isolated_home)
    entries = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file() or p.is_symlink()}
    assert entries == LINKED_KEPT, entries


async def test_an_http_caller_cannot_send_a_hard_link_to_a_file_outside(hub: Emulator, tmp_path: Path) -> None:
    shared, private = tmp_path / "shared", tmp_path / "private"
    project = shared / "proj"
    project.mkdir(parents=True)
    private.mkdir()
    (project / "train.py").write_text("print('train')\n")
    (private / "wallet.txt").write_text("OUTSIDE-CANARY\n")
    os.link(private / "wallet.txt", project / "data.txt")  # a name inside, the file outside
    access = Access.http(local_dirs=[str(shared)], scripts=True)
    before = len(hub.posted_jobs())
    result = await call_once("run_script", {"folder": str(project), "script": "train.py"}, access)
    assert result.is_error and "hard link" in result.content[0].text, result.content[0].text
    os.link(project / "train.py", private / "train-copy.py")  # the script itself has a name outside
    entry = await call_once("run_script", {"script": str(project / "train.py"), "dry_run": True}, access)
    assert entry.is_error and "hard-linked" in entry.content[0].text, entry.content[0].text
    assert "OUTSIDE-CANARY" not in shown(result.content[0].text, entry.content[0].text)
    assert len(hub.posted_jobs()) == before and not hub.buckets.get("emu-user/jobs-artifacts", {}).get("files")


# --- 33: the address checked is the address fetched ---------------------------------------------------------------
REBIND_HOST = "scripts.rebind.test"
PUBLIC = "1.1.1.1"  # is_global: passes the check


def rebinding_resolver(monkeypatch: pytest.MonkeyPatch, first: str = PUBLIC, then: str = "127.0.0.1") -> list:
    """A DNS that answers `first` for REBIND_HOST once, then `then` (DNS rebinding); other names as usual."""
    real, asked = socket.getaddrinfo, []

    def resolve(host, port, *args, **kwargs):
        if host != REBIND_HOST:
            return real(host, port, *args, **kwargs)
        answer = first if not asked else then
        asked.append(answer)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return asked


def dialling(monkeypatch: pytest.MonkeyPatch, public_goes_to: int | None) -> list:
    """socket.create_connection recorded; the public address is this machine's port `public_goes_to` (standing
    for the real host there), or refused (nothing listens there)."""
    real, dialled = socket.create_connection, []

    def connect(address, *args, **kwargs):
        dialled.append(address[:2])
        if address[0] == PUBLIC:
            if public_goes_to is None:
                raise ConnectionRefusedError(111, "refused")
            return real(("127.0.0.1", public_goes_to), *args, **kwargs)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", connect)
    return dialled


@pytest.fixture
def loopback_listener():
    """A socket on 127.0.0.1 that counts who connects to it: the server's own network, never to be reached."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    hits, stop = [], threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            hits.append(1)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    stop.set()
    thread.join(2)
    server.close()


async def test_a_rebinding_name_never_reaches_the_servers_own_network(hub: Emulator, loopback_listener,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    port, hits = loopback_listener
    asked = rebinding_resolver(monkeypatch)
    dialled = dialling(monkeypatch, public_goes_to=None)
    url = f"https://{REBIND_HOST}:{port}/train.py"
    with pytest.raises(HubError, match="could not read script URL"):
        script_urls.fetch_script(url, remote=True)
    assert asked == [PUBLIC] and dialled == [(PUBLIC, port)] and hits == []  # looked up once, dialled as checked
    before, dialled[:], asked[:] = len(hub.posted_jobs()), [], []
    result = await call_once("run_script", {"script": url}, Access.http(scripts=True))
    assert result.is_error and "could not read script URL" in result.content[0].text
    assert [d for d in dialled if d[1] == port] == [(PUBLIC, port)]  # (the emulated Hub is dialled too)
    assert hits == [] and len(hub.posted_jobs()) == before


def tls_server(tmp_path: Path, name: str, body: bytes) -> tuple[int, Path, list]:
    """An https server on 127.0.0.1 whose certificate names `name`, signed by a CA of this test (returned, for
    SSL_CERT_FILE); it records each request's Host header and TLS server name."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def certificate(subject: str, key, issuer, issuer_key, ca: bool):
        now, hour = datetime.datetime.now(datetime.UTC), datetime.timedelta(hours=1)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - hour).not_valid_after(now + hour)
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hftm test CA")])
    ca = certificate("hftm test CA", ca_key, ca_name, ca_key, True)
    leaf = certificate(name, key, ca_name, ca_key, False)
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp_path / "leaf.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    seen: list = []
    context.sni_callback = lambda sock, server_name, ctx: seen.append(("sni", server_name))
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(raw, server_side=True) as conn:
                    request = conn.recv(65536).decode()
                    seen.append(("host", next(line.split(":", 1)[1].strip() for line in request.split("\r\n")
                                              if line.lower().startswith("host:"))))
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                                 + body)
            except (ssl.SSLError, OSError, StopIteration):
                raw.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], tmp_path / "ca.pem", seen


@pytest.mark.parametrize("certified", [REBIND_HOST, "someone-else.test"])
def test_the_checked_address_is_fetched_with_the_names_certificate_check(tmp_path: Path, certified: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    port, ca, seen = tls_server(tmp_path, certified, b"print('fetched from the checked address')\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    rebinding_resolver(monkeypatch)
    dialled = dialling(monkeypatch, public_goes_to=port)  # the public address is where the real host answers
    url = f"https://{REBIND_HOST}:{port}/train.py"
    if certified != REBIND_HOST:  # a certificate for another name is refused as before: TLS is checked whole
        with pytest.raises(HubError):
            script_urls.fetch_script(url, remote=True)
        return
    assert script_urls.fetch_script(url, remote=True) == "print('fetched from the checked address')\n"
    assert dialled == [(PUBLIC, port)]
    assert ("sni", REBIND_HOST) in seen and ("host", f"{REBIND_HOST}:{port}") in seen


def test_an_address_checked_inside_is_still_refused_before_any_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    rebinding_resolver(monkeypatch, first="10.0.0.5")
    dialled = dialling(monkeypatch, public_goes_to=None)
    with pytest.raises(TrainError, match="server's own network"):
        script_urls.fetch_script(f"https://{REBIND_HOST}/train.py", remote=True)
    assert dialled == []


@pytest.mark.parametrize("backend", ["hf", "local"])
@pytest.mark.parametrize("value", ["${DATABASE_URL}", "${env:DATABASE_URL}", ""])
async def test_a_secret_left_as_its_clients_placeholder_is_refused_with_nothing_launched(
        backend: str, value: str, hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client config that names an unset variable hands the server its placeholder as text (item 28): sent on,
    the job would get '${DATABASE_URL}' as its connection string. Unset, a local run went on without it."""
    monkeypatch.setenv("DATABASE_URL", value)
    before = len(hub.posted_jobs())
    result = await call_once("run_script", {"script": HEADER_PICKS.replace("raise", "# raise"), "backend": backend,
                                            "secrets": ["DATABASE_URL"]})
    assert result.is_error, result.structured_content
    assert "secret DATABASE_URL is" in result.content[0].text and "Nothing was submitted" in result.content[0].text
    assert hub.posted_jobs()[before:] == []
    jobs = Path(os.environ["HF_TRAIN_HOME"]) / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []
