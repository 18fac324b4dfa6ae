"""What a client-only agent puts where the embedded server's parts were
(runtime/agent/clientmode.py): templates, service registrations, which routes stay local
(layer 1: no I/O)."""

from __future__ import annotations

import pytest
import trio

from yurt.runtime.agent.clientmode import (
    ClientTemplateData,
    UnsentCatalogue,
    node_local,
)
from yurt.runtime.client.templating.render import compile_all, render_all
from yurt.runtime.gotemplate.parse import TemplateError
from yurt.runtime.structs.service import ServiceRegistration
from yurt.runtime.structs.template import Template


class _Server:
    def __init__(self) -> None:
        self.visible_index = 3
        self.changed = trio.Event()


@pytest.mark.parametrize("text", [
    '{{ range nomadService "db" }}{{ .Address }}{{ end }}',
    "{{ range nomadServices }}{{ .Name }}{{ end }}",
    '{{ with nomadVar "nomad/jobs/web" }}{{ .pw }}{{ end }}',
    '{{ range nomadVarList "nomad" }}{{ .Path }}{{ end }}',
])
async def test_a_template_reading_server_data_fails_clearly(text: str) -> None:
    (compiled,) = await compile_all([(Template(destination="local/out"), text)],
                                    in_thread=False)
    with pytest.raises(TemplateError, match=r"a client-only agent \(--servers\) has no"):
        await render_all([compiled], ClientTemplateData(_Server()), {}, in_thread=False)


async def test_a_template_of_the_environment_renders() -> None:
    (compiled,) = await compile_all([(Template(destination="local/out"),
                                      '{{ env "NOMAD_TASK_NAME" }}')], in_thread=False)
    render = await render_all([compiled], ClientTemplateData(_Server()),
                              {"NOMAD_TASK_NAME": "web"}, in_thread=False)
    assert [r.text for r in render.results] == ["web"]


async def test_the_template_index_follows_the_server() -> None:
    server = _Server()
    data = ClientTemplateData(server)
    assert data.index() == 3
    async with trio.open_nursery() as nursery:
        got: list[int] = []

        async def wait() -> None:
            got.append(await data.wait_changed(3))

        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert not got
        server.visible_index = 4
        changed, server.changed = server.changed, trio.Event()
        changed.set()
    assert got == [4]


async def test_service_registrations_go_nowhere(caplog: pytest.LogCaptureFixture) -> None:
    catalogue = UnsentCatalogue()
    reg = ServiceRegistration(id="_nomad-task-a-web-web-80", service_name="web")
    assert await catalogue.upsert([reg]) is None
    assert await catalogue.upsert([reg]) is None
    assert await catalogue.deregister([reg.id]) is None
    warned = [r for r in caplog.records if "is not registered" in r.getMessage()]
    assert len(warned) == 1  # once per service, not per call


@pytest.mark.parametrize(("path", "local"), [
    ("/v1/agent/self", True), ("/v1/agent/health", True), ("/v1/metrics", True),
    ("/v1/client/fs/ls/a1", True), ("/v1/client/allocation/a1/exec", True),
    ("/v1/client/stats", True), ("/.well-known/jwks.json", True),
    ("/v1/jobs", False), ("/v1/allocation/a1", False), ("/v1/node/n1/drain", False),
    ("/v1/agent/members", False), ("/v1/agent/selfish", False), ("/v1/event/stream", False),
])
def test_which_routes_the_client_answers_itself(path: str, local: bool) -> None:
    assert node_local(path) is local
