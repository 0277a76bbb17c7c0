"""The ledger as it fails in the field: a damaged file is reported in words on every tool (without the server's
paths), a lost one does not make a keyed retry launch twice (the Hub's labels remember the key), and the file is
readable by its owner only (it holds reward code, paths and requests)."""

import os
import stat
from pathlib import Path

import anyio
import pytest

from hf_train_mcp.access import Access
from hf_train_mcp.jobs.ledger import Ledger
from tests.emulator import Emulator
from tests.helpers import CHAT_BASE as BASE
from tests.helpers import call_once as call

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("chat")]


def ledger_files(home: Path) -> list[Path]:
    return [home / f"ledger.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]


@pytest.mark.parametrize("access", [None, Access.http()], ids=["stdio", "http"])
async def test_a_damaged_ledger_is_reported_in_words_on_every_tool(hub: Emulator, isolated_home: Path,
                                                                   access: Access | None) -> None:
    ok = await call("submit_training", BASE)
    assert not ok.is_error, ok.content[0].text
    for path in ledger_files(isolated_home):
        path.unlink(missing_ok=True)
    (isolated_home / "ledger.sqlite3").write_bytes(os.urandom(8192))  # garbage where the database was
    before = len(hub.posted_jobs())
    for tool, arguments in (("list_jobs", {}), ("job_status", {"job_id": ok.structured_content["job_id"]}),
                            ("submit_training", {**BASE, "idempotency_key": "after-damage"}),
                            ("compare_runs", {"sweep_id": "sweep-0123456789ab"})):
        result = await call(tool, arguments, access)
        text = result.content[0].text
        assert result.is_error and "ledger.sqlite3 in HF_TRAIN_HOME) is unreadable" in text, (tool, text)
        assert "move it aside" in text, text
        assert str(isolated_home) not in text and "unexpected error" not in text, text
    assert len(hub.posted_jobs()) == before
    (isolated_home / "ledger.sqlite3").rename(isolated_home / "ledger.sqlite3.bad")  # what the message says
    assert not (await call("list_jobs", {}, access)).is_error


async def test_a_lost_ledger_does_not_forget_which_keys_launched(hub: Emulator, isolated_home: Path) -> None:
    first = await call("submit_training", {**BASE, "idempotency_key": "nightly-secret-42"})
    assert not first.is_error, first.content[0].text
    job_id = first.structured_content["job_id"]
    labels = hub.jobs[job_id].spec["labels"]
    assert labels["idempotency"] and "nightly-secret-42" not in str(labels)  # a hash: labels are public
    for path in ledger_files(isolated_home):
        path.unlink(missing_ok=True)  # the ledger is gone (deleted, or moved aside as the error advised)
    before = len(hub.posted_jobs())
    again = await call("submit_training", {**BASE, "idempotency_key": "nightly-secret-42"})
    assert not again.is_error, again.content[0].text
    assert again.structured_content["job_id"] == job_id and len(hub.posted_jobs()) == before
    assert any("matched job" in w for w in again.structured_content["warnings"])
    assert Ledger().by_idempotency_key("nightly-secret-42").job_id == job_id  # adopted: the next retry asks no Hub
    other = await call("submit_training", {**BASE, "idempotency_key": "nightly-secret-43"})
    assert other.structured_content["job_id"] != job_id and len(hub.posted_jobs()) == before + 1


def test_the_ledger_and_its_folder_are_private(isolated_home: Path) -> None:
    umask = os.umask(0o022)  # the usual umask, which would leave new files world-readable
    try:
        Ledger()  # opened: created
        assert stat.S_IMODE((isolated_home / "ledger.sqlite3").stat().st_mode) == 0o600
        assert stat.S_IMODE(isolated_home.stat().st_mode) == 0o700
        for path in ledger_files(isolated_home)[1:]:
            if path.exists():
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        os.chmod(isolated_home / "ledger.sqlite3", 0o644)  # a ledger of an older release
        Ledger()
        assert stat.S_IMODE((isolated_home / "ledger.sqlite3").stat().st_mode) == 0o600
    finally:
        os.umask(umask)


@pytest.mark.detached
async def test_a_lost_ledger_does_not_launch_a_keyed_sweep_again(hub: Emulator, isolated_home: Path) -> None:
    sweep = {"base": BASE, "grid": {"learning_rate": [1e-4, 2e-4]}, "idempotency_key": "nightly-sweep-7"}
    before = len(hub.posted_jobs())
    first = await call("submit_sweep", sweep)
    assert not first.is_error, first.content[0].text
    posted = len(hub.posted_jobs())
    assert posted == before + 2
    for path in ledger_files(isolated_home):
        path.unlink(missing_ok=True)
    again = await call("submit_sweep", sweep)
    assert not again.is_error, again.content[0].text
    assert again.structured_content["sweep_id"] == first.structured_content["sweep_id"]
    ids = lambda result: sorted(j["job_id"] for j in result.structured_content["jobs"] if j["job_id"])  # noqa: E731
    with anyio.fail_after(30):  # a run the first sweep's supervisor claimed meanwhile is still being adopted
        while len(ids(again)) < len(ids(first)):
            await anyio.sleep(0.5)
            again = await call("submit_sweep", sweep)  # the same key: the sweep as the ledger has it now
    assert ids(again) == ids(first), (again.structured_content["jobs"], first.structured_content["jobs"])
    assert len(hub.posted_jobs()) == posted  # its runs' jobs were found on the Hub by their keys' labels


def test_servers_opening_a_new_ledger_at_once_all_open_it(tmp_path, monkeypatch) -> None:
    """The switch to WAL is a race SQLite answers "database is locked" at once: every opener must still get in."""
    import threading

    from hf_train_mcp.jobs.ledger import Ledger

    failures: list[BaseException] = []
    for round_ in range(12):
        monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / f"home-{round_}"))
        start = threading.Barrier(6)

        def open_one() -> None:
            start.wait()
            try:
                Ledger().get("nothing")
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                failures.append(exc)

        threads = [threading.Thread(target=open_one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:1]
