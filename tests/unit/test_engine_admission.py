"""The engine asks a back end with its own admission rules (:class:`Admitting`) before
anything is stored: the real Kubernetes back end's access policy, no apiserver needed
(``check_admission`` makes no call)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.backend import Admitting
from bridge.engine import Engine, EngineSettings
from bridge.errors import PermissionDenied
from bridge.model import ANN_BATCH_SCRIPT, ValidationError, load_trainjob
from bridge.runtimes import RuntimeCatalog
from bridge.store import Store
from k8s_adapter.backend import create
from tests.unit.builders import ALICE, BOB, inventory
from tests.unit.fakes import FakeBackend


def engine(tmp_path: Path) -> Engine:
    backend = create("kubernetes", {"kubeconfig": "/nonexistent", "users": {
        "alice": {"namespace": "team-a", "service_account": "alice"}}})
    assert isinstance(backend, Admitting)
    return Engine(Store.open(tmp_path / "s.sqlite"), {"kubernetes": backend},
                  RuntimeCatalog(), EngineSettings(default_backend="kubernetes"))


def doc(namespace: str | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": "t"}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "spec": {"runtimeRef": {"name": "torch-distributed"},
                                       "trainer": {"numNodes": 1, "image": "busybox",
                                                   "command": ["true"]}}}


def test_a_refusal_is_a_403_and_nothing_is_stored(tmp_path: Path) -> None:
    e = engine(tmp_path)
    for owner, namespace, says in [(BOB, None, "backends.kubernetes.users"),
                                   (ALICE, "kube-system", "metadata.namespace")]:
        with pytest.raises(PermissionDenied) as err:
            e.admit(load_trainjob(doc(namespace)), owner)
        assert says in str(err.value)
    assert e.store.list_jobs() == []


def test_the_mapped_namespace_is_the_default_not_the_engines(tmp_path: Path) -> None:
    rec = engine(tmp_path).admit(load_trainjob(doc()), ALICE)
    assert rec.job.metadata.namespace == "team-a"


@pytest.mark.parametrize("field", ["podSpecOverrides", "runtimePatches"])
def test_pod_fields_are_refused_by_a_back_end_without_pods(tmp_path: Path, field: str
                                                           ) -> None:
    """On Slurm or Flux a pod's fields mean nothing: refused naming them, not ignored."""
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": FakeBackend(inventory())},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    job = doc()
    spec = job["spec"]
    assert isinstance(spec, dict)
    spec[field] = [{"targetJobs": [{"name": "node"}], "tolerations": []}] if (
        field == "podSpecOverrides") else [{"manager": "me"}]
    with pytest.raises(ValidationError) as err:
        e.admit(load_trainjob(job), ALICE)
    assert f"spec.{field}: back end 'slurm' runs no pods" in str(err.value)
    assert e.store.list_jobs() == []


def test_kueues_entry_is_not_a_users_pod_field(tmp_path: Path) -> None:
    """Kueue's webhook adds its entry to every TrainJob CR it may queue
    (k8s_adapter/kueue.py): such a job may still go to Slurm; an entry of anyone else
    beside it is refused, and so is that entry sent through the API (the caller's)."""
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": FakeBackend(inventory())},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    kueue = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}}}}
    job = doc()
    del job["spec"]["trainer"]["image"]  # type: ignore[index]  # (no container runtime)
    job["spec"]["runtimePatches"] = [kueue]  # type: ignore[index]
    with pytest.raises(ValidationError, match=r"spec\.runtimePatches: back end 'slurm'"):
        e.admit(load_trainjob(job), ALICE)  # through the API
    assert e.admit(load_trainjob(job), ALICE, origin="kubernetes").backend == "slurm"
    job["metadata"]["name"] = "t2"  # type: ignore[index]
    job["spec"]["runtimePatches"] = [kueue, {"manager": "me"}]  # type: ignore[index]
    with pytest.raises(ValidationError, match=r"spec\.runtimePatches: back end 'slurm'"):
        e.admit(load_trainjob(job), ALICE, origin="kubernetes")
    assert len(e.store.list_jobs()) == 1


async def test_a_task_that_ignores_its_cancellation_does_not_keep_the_engine_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A back-end call stuck past its cancellation (an exit report that never comes):
    the engine stops after its grace, leaving that task behind, instead of hanging."""
    import asyncio

    from bridge import engine as engine_module

    monkeypatch.setattr(engine_module, "SHUTDOWN_GRACE", 0.2)
    stuck, watching = asyncio.Event(), asyncio.Event()

    class Stubborn(FakeBackend):
        async def watch(self, interval: float):  # type: ignore[no-untyped-def,override]
            while True:
                try:
                    watching.set()
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    stuck.set()
                    await asyncio.get_running_loop().create_future()  # never done
                yield  # pragma: no cover

    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": Stubborn(inventory())},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    running = asyncio.create_task(e.run())
    await asyncio.wait_for(watching.wait(), 30)
    await e.stop()
    await asyncio.wait_for(running, 30)
    assert stuck.is_set()


async def test_a_task_that_lost_its_cancellation_is_cancelled_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A status watch whose cancel was lost on its way (3.11's wait_for returned the
    finished call's result instead) went on polling its back end after shutdown: the
    engine cancels again what still runs, and the watch ends within the grace."""
    import asyncio

    from bridge import engine as engine_module

    monkeypatch.setattr(engine_module, "CANCEL_AGAIN", 0.05)
    cancels, watching = [], asyncio.Event()

    class LosesOne(FakeBackend):
        async def watch(self, interval: float):  # type: ignore[no-untyped-def,override]
            while True:
                try:
                    watching.set()
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancels.append(1)
                    if len(cancels) > 1:
                        raise
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                yield  # pragma: no cover

    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": LosesOne(inventory())},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    running = asyncio.create_task(e.run())
    async with asyncio.timeout(30):
        await watching.wait()
    await e.stop()
    async with asyncio.timeout(30):
        await running
    track = next(t for t in e._tasks if t.get_name() == "track-slurm")
    assert track.done() and len(cancels) == 2


class _Containers(FakeBackend):
    """A back end that runs no pods, with or without a container runtime's command."""

    def __init__(self, command: tuple[str, ...], setting: str | None) -> None:
        super().__init__(inventory())
        self.container_command = command
        self.container_setting = setting


@pytest.mark.parametrize(("command", "setting", "script", "refusal"), [
    ((), "backends.slurm.container_command", False,
     "spec.trainer.image: back end 'slurm' runs no container images: an admin sets "
     "backends.slurm.container_command (the container runtime's command, e.g. "
     '["apptainer", "exec", "docker://{image}"]) to run images there, or drop the image'),
    ((), None, False, "spec.trainer.image: back end 'slurm' runs no container images: "
                      "drop the image to run on the nodes' own software"),
    (("run", "{image}"), "backends.slurm.container_command", True,
     "spec.trainer.image: a batch script runs on the nodes of back end 'slurm' themselves"),
    (("run", "{image}"), "backends.slurm.container_command", False, None),
])
def test_an_image_is_run_through_the_container_command_or_refused_never_ignored(
        tmp_path: Path, command: tuple[str, ...], setting: str | None, script: bool,
        refusal: str | None) -> None:
    e = Engine(Store.open(tmp_path / "s.sqlite"), {"slurm": _Containers(command, setting)},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    job = doc()
    if script:
        job["metadata"]["annotations"] = {  # type: ignore[index]
            ANN_BATCH_SCRIPT: "#!/bin/sh\ntrue\n"}
    if refusal is None:
        assert e.admit(load_trainjob(job), ALICE).backend == "slurm"
        return
    with pytest.raises(ValidationError) as err:
        e.admit(load_trainjob(job), ALICE)
    assert str(err.value).startswith(refusal), str(err.value)
    del job["spec"]["trainer"]["image"]  # type: ignore[index]
    assert e.admit(load_trainjob(job), ALICE).backend == "slurm"  # the runtime's: no ask


@pytest.mark.parametrize("image", ["--bind=/:/host", "-v", "a b", "x\ny", "a" * 600])
def test_an_image_is_a_reference_never_an_option_of_the_runtime(tmp_path: Path,
                                                                image: str) -> None:
    e = Engine(Store.open(tmp_path / "s.sqlite"),
               {"slurm": _Containers(("run", "{image}"), "backends.slurm.container_command")},
               RuntimeCatalog(), EngineSettings(default_backend="slurm"))
    job = doc()
    job["spec"]["trainer"]["image"] = image  # type: ignore[index]
    with pytest.raises(ValidationError, match="is not an image reference"):
        e.admit(load_trainjob(job), ALICE)
