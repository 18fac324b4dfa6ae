"""Dynamic host volumes against a real agent (layer 2): /v1/volume/host/create, register,
read, delete and /v1/volumes?type=host, as Nomad's (nomad/host_volume_endpoint.go); the mkdir
plugin's directory on disk and external plugins run with Nomad's `DHV_*` protocol; the node's
`HostVolumes` gaining and losing the volume; an agent restart keeping it ready; a blocked job
placed once its volume is; the host-volume ACL capabilities."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import trio

from tests.agent_support import running_agent, wait_status
from yurt.runtime.lib import snapshot as snapshot_archive


def _spec(**extra: Any) -> dict[str, Any]:
    return {"Volume": {"Name": "data", "PluginID": "mkdir", **extra}}


async def test_create_read_list_delete(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as r:
            c = r.client
            resp = await c.put("/v1/volume/host/create",
                               json=_spec(Parameters={"mode": "0750"}))
            assert resp.status_code == 200, resp.text
            vol = resp.json()["Volume"]
            assert vol["State"] == "ready"
            assert vol["NodeID"] == r.agent.node.id
            assert vol["NodePool"] == "default"
            assert vol["Namespace"] == "default"
            assert vol["PluginID"] == "mkdir"
            assert vol["RequestedCapabilities"] == [
                {"AttachmentMode": "file-system", "AccessMode": "single-node-writer"}]
            assert resp.json()["Index"] == vol["ModifyIndex"] == vol["CreateIndex"]
            path = Path(vol["HostPath"])
            assert path == tmp_path / "host_volumes" / vol["ID"]
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o750

            node = (await c.get(f"/v1/node/{r.agent.node.id}")).json()
            assert node["HostVolumes"]["data"] == {
                "Name": "data", "Path": str(path), "ReadOnly": False, "ID": vol["ID"]}

            got = await c.get(f"/v1/volume/host/{vol['ID']}")
            assert got.status_code == 200
            found = (await c.put("/v1/search", json={"Prefix": vol["ID"][:4],
                                                     "Context": "host_volumes"})).json()
            assert found["Matches"] == {"host_volumes": [vol["ID"]]}
            assert got.json()["Allocations"] == []
            assert got.json()["HostPath"] == str(path)
            listed = (await c.get("/v1/volumes", params={"type": "host"})).json()
            assert [v["ID"] for v in listed] == [vol["ID"]]
            assert set(listed[0]) == {"Namespace", "ID", "Name", "PluginID", "NodePool",
                                      "NodeID", "CapacityBytes", "State", "CreateIndex",
                                      "CreateTime", "ModifyIndex", "ModifyTime"}
            assert (await c.get("/v1/volumes")).json() == []
            assert (await c.get("/v1/volumes", params={"type": "nfs"})).status_code == 404

            # A second volume of the same name has no node left to go to.
            again = await c.put("/v1/volume/host/create", json=_spec())
            assert again.status_code == 409
            assert again.text == ('could not place volume "data": no node meets constraints: '
                                  "1 nodes had existing volume, 0 nodes filtered by node pool "
                                  "governance, 0 nodes were infeasible")

            gone = await c.delete(f"/v1/volume/host/{vol['ID']}")
            assert gone.status_code == 200
            assert gone.json()["Index"] > vol["ModifyIndex"]
            assert not await trio.Path(path).exists()
            node = (await c.get(f"/v1/node/{r.agent.node.id}")).json()
            assert "data" not in (node["HostVolumes"] or {})
            wrong = await c.delete("/v1/volume/host/create")
            assert wrong.status_code == 405  # as every method create does not take
            missing = await c.get(f"/v1/volume/host/{vol['ID']}")
            assert (missing.status_code, missing.text) == (404, "volume not found")
            again = await c.delete(f"/v1/volume/host/{vol['ID']}")
            assert (again.status_code, again.text) == (404, f"no such volume: {vol['ID']}")


async def test_changes_are_host_volume_events(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as r:
            events = r.agent.broker.subscribe()
            vol = (await r.client.put("/v1/volume/host/create", json=_spec())).json()["Volume"]
            assert (await r.client.delete(f"/v1/volume/host/{vol['ID']}")).status_code == 200
            seen = []
            while len(seen) < 2:
                record = await events.receive()
                seen += [(e.type, e.key, e.index) for e in record.events
                         if e.topic == "HostVolume"]
            assert seen[0] == ("HostVolumeRegistered", vol["ID"], vol["ModifyIndex"])
            assert seen[1][:2] == ("HostVolumeDeleted", vol["ID"])
            assert seen[1][2] > vol["ModifyIndex"]
            events.close()


async def test_refusals_in_nomads_words(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as r:
            c = r.client

            async def create(body: dict[str, Any]) -> tuple[int, str]:
                resp = await c.put("/v1/volume/host/create", json=body)
                return resp.status_code, resp.text

            assert await create(_spec(PluginID="nfs")) == (
                409, 'could not place volume "data": no node meets constraints: 0 nodes had '
                     "existing volume, 0 nodes filtered by node pool governance, 1 nodes were "
                     "infeasible")
            assert await create(_spec(Name="")) == (
                400, "volume validation failed: missing name")
            assert await create(_spec(RequestedCapacityMinBytes=10,
                                      RequestedCapacityMaxBytes=5)) == (
                400, "volume validation failed: capacity_max (5) must be larger than "
                     "capacity_min (10)")
            assert await create(_spec(Namespace="nope")) == (
                400, 'volume validation failed: no such namespace "nope"')
            assert await create(_spec(NodeID="0000")) == (
                400, 'validating volume "data" against state failed: node "0000" does not '
                     "exist")
            status, text = await create(_spec(Parameters={"color": "red"}))
            assert (status, text) == (
                400, 'invalid value for "color": unknown mkdir parameter: "color"')
            assert await create({}) == (400, "missing volume definition")
            # Nothing of the refused creates is left behind.
            assert (await c.get("/v1/volumes", params={"type": "host"})).json() == []
            volumes_dir = trio.Path(tmp_path / "host_volumes")
            assert not await volumes_dir.exists() or not await volumes_dir.iterdir()


async def test_register_an_existing_directory(tmp_path: Path) -> None:
    existing = tmp_path / "shared"
    existing.mkdir()
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data") as r:
            c = r.client
            refused = await c.put("/v1/volume/host/register",
                                  json={"Volume": {"Name": "shared", "HostPath": str(existing)}})
            assert (refused.status_code, refused.text) == (
                400, "cannot register volume: node ID is required")
            resp = await c.put("/v1/volume/host/register", json={"Volume": {
                "Name": "shared", "HostPath": str(existing), "NodeID": r.agent.node.id}})
            assert resp.status_code == 200, resp.text
            vol = resp.json()["Volume"]
            assert vol["State"] == "ready"
            assert vol["HostPath"] == str(existing)
            assert (await c.delete(f"/v1/volume/host/{vol['ID']}")).status_code == 200
            assert existing.is_dir()  # a registered volume's directory is the operator's


async def test_restart_keeps_the_volume_ready(tmp_path: Path) -> None:
    with trio.fail_after(60):
        shared = trio.Path(tmp_path / "shared")
        await shared.mkdir()
        async with running_agent(tmp_path, dev_mode=False) as r:
            vol = (await r.client.put("/v1/volume/host/create", json=_spec())).json()["Volume"]
            lost = (await r.client.put("/v1/volume/host/register", json={"Volume": {
                "Name": "lost", "HostPath": str(shared), "NodeID": r.agent.node.id}})
            ).json()["Volume"]
            assert lost["State"] == "ready"
        path = Path(vol["HostPath"])
        await trio.Path(path / "kept").write_text("x")
        await shared.rmdir()  # a registered volume's directory gone while the agent was down
        async with running_agent(tmp_path, dev_mode=False) as r:
            got = (await r.client.get(f"/v1/volume/host/{vol['ID']}")).json()
            assert got["State"] == "ready"
            assert got["CreateIndex"] == vol["CreateIndex"]
            node = (await r.client.get(f"/v1/node/{r.agent.node.id}")).json()
            assert node["HostVolumes"]["data"]["ID"] == vol["ID"]
            assert await trio.Path(path / "kept").read_text() == "x"
            # Nomad's upsertHostVolumeForNode: ready, then missing from the node.
            gone = (await r.client.get(f"/v1/volume/host/{lost['ID']}")).json()
            assert gone["State"] == "unavailable"
            assert "lost" not in node["HostVolumes"]
            assert gone["ModifyIndex"] > lost["ModifyIndex"]
            # A snapshot of the server carries the book (its directories stay the node's).
            snap = await r.client.get("/v1/operator/snapshot")
            assert snap.status_code == 200
            archive = trio.Path(tmp_path / "snap.tar.gz")
            await archive.write_bytes(snap.content)
            state = snapshot_archive.state_map(snapshot_archive.read(Path(archive)))
            assert sorted(v["ID"] for v in state["HostVolumes"]) == sorted(
                [vol["ID"], lost["ID"]])
            # The index counter never goes back below what the volume carries.
            fresh = await r.client.put("/v1/volume/host/create", json=_spec(Name="more"))
            assert fresh.json()["Volume"]["CreateIndex"] > vol["ModifyIndex"]


async def test_a_job_waiting_for_a_volume_is_placed_once_it_is_ready(tmp_path: Path) -> None:
    job = {"Job": {"ID": "waits", "Type": "service", "TaskGroups": [{
        "Name": "g", "Volumes": {"v": {"Name": "v", "Type": "host", "Source": "late"}},
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"},
                   "Resources": {"CPU": 1, "MemoryMB": 10}}]}]}}
    with trio.fail_after(30):
        async with running_agent(tmp_path) as r:
            c = r.client
            assert (await c.post("/v1/jobs", json=job)).status_code == 200
            while True:  # blocked: the node lacks the volume
                evals = (await c.get("/v1/job/waits/evaluations")).json()
                if any(e["Status"] == "blocked" for e in evals):
                    break
                await trio.sleep(0.05)
            assert (await c.get("/v1/job/waits/allocations")).json() == []
            made = await c.put("/v1/volume/host/create", json=_spec(Name="late"))
            assert made.status_code == 200, made.text
            alloc = await wait_status(c, "waits", "running")
            assert alloc["NodeID"] == r.agent.node.id
            got = (await c.get(f"/v1/volume/host/{made.json()['Volume']['ID']}")).json()
            assert [a["ID"] for a in got["Allocations"]] == [alloc["ID"]]


async def test_acl_host_volume_capabilities_in_the_volumes_namespace(tmp_path: Path) -> None:
    from tests.authz_support import acl_agent

    with trio.fail_after(30):
        async with acl_agent(tmp_path) as at:
            assert (await at.admin.put("/v1/namespace/prod", json={"Name": "prod"})
                    ).status_code == 200
            creator = at.resolver.token('namespace "default" { capabilities = '
                                        '["host-volume-create"] }')
            reader = at.resolver.token('namespace "*" { capabilities = ["host-volume-read"] }')

            async def put(secret: str, body: dict[str, Any]) -> int:
                resp = await at.admin.put("/v1/volume/host/create", json=body,
                                          headers={"X-Nomad-Token": secret})
                return resp.status_code

            # The route checks the request's namespace, the handler the body's.
            assert await put(creator, _spec(Namespace="prod")) == 403
            assert await put(reader, _spec()) == 403
            assert await put(creator, _spec()) == 200
            assert await put(at.admin.headers["X-Nomad-Token"], _spec(
                Name="other", Namespace="prod")) == 200
            listed = await at.admin.get("/v1/volumes", params={
                "type": "host", "namespace": "*"}, headers={"X-Nomad-Token": reader})
            assert sorted(v["Namespace"] for v in listed.json()) == ["default", "prod"]
            only = await at.admin.get("/v1/volumes", params={
                "type": "host", "namespace": "*"}, headers={"X-Nomad-Token": creator})
            assert [v["Namespace"] for v in only.json()] == ["default"]  # create implies read
            vol_id = only.json()[0]["ID"]
            refused = await at.admin.delete(f"/v1/volume/host/{vol_id}",
                                            headers={"X-Nomad-Token": reader})
            assert refused.status_code == 403


PLUGIN = """#!/bin/sh
case "$1" in
fingerprint) echo '{"version": "1.2.3"}' ;;
create)
  dir="$DHV_VOLUMES_DIR/ext-$DHV_VOLUME_ID"
  /bin/mkdir -p "$dir" || exit 1
  echo "$DHV_OPERATION $DHV_NAMESPACE $DHV_VOLUME_NAME $DHV_PARAMETERS" >"$dir/seen"
  printf '{"path": "%s", "bytes": 42}' "$dir" ;;
delete) /bin/rm -rf "$DHV_CREATED_PATH" ;;
esac
"""
BROKEN = """#!/bin/sh
if [ "$1" = fingerprint ]; then echo '{"version": "0.1"}'; exit 0; fi
echo '{"error": "disk full"}'; exit 3
"""
NO_FINGERPRINT = "#!/bin/sh\nexit 1\n"


async def test_external_plugins_speak_nomads_protocol(tmp_path: Path) -> None:
    plugins = trio.Path(tmp_path / "host_volume_plugins")
    await plugins.mkdir()
    for name, text in (("ext", PLUGIN), ("broken", BROKEN), ("nofp", NO_FINGERPRINT)):
        await (plugins / name).write_text(text)
        await (plugins / name).chmod(0o755)
    with trio.fail_after(30):
        async with running_agent(tmp_path) as r:
            c = r.client
            attrs = (await c.get(f"/v1/node/{r.agent.node.id}")).json()["Attributes"]
            assert {k: v for k, v in attrs.items() if k.startswith("plugins.host_volume")} == {
                "plugins.host_volume.ext.version": "1.2.3",
                "plugins.host_volume.broken.version": "0.1",
                "plugins.host_volume.mkdir.version": "0.0.1"}

            made = await c.put("/v1/volume/host/create", json=_spec(
                PluginID="ext", Parameters={"size": "big"}))
            assert made.status_code == 200, made.text
            vol = made.json()["Volume"]
            path = trio.Path(vol["HostPath"])
            assert (vol["State"], vol["CapacityBytes"]) == ("ready", 42)
            assert str(path) == str(tmp_path / "host_volumes" / f"ext-{vol['ID']}")
            assert await (path / "seen").read_text() == (
                'create default data {"size":"big"}\n')

            broken = await c.put("/v1/volume/host/create", json=_spec(
                Name="b", PluginID="broken"))
            failed_id = broken.text.split('"')[1]
            assert (broken.status_code, broken.text) == (
                500, f'error creating volume "{failed_id}" with plugin "broken": exit status 3: '
                     "disk full")
            listed = (await c.get("/v1/volumes", params={"type": "host"})).json()
            assert [v["Name"] for v in listed] == ["data"]  # nothing of the failed create
            nofp = await c.put("/v1/volume/host/create", json=_spec(Name="n", PluginID="nofp"))
            assert "1 nodes were infeasible" in nofp.text

            assert (await c.delete(f"/v1/volume/host/{vol['ID']}")).status_code == 200
            assert not await path.exists()


async def test_an_unreadable_book_is_kept_aside_and_the_agent_starts(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path, dev_mode=False) as r:
            vol = (await r.client.put("/v1/volume/host/create", json=_spec())).json()["Volume"]
        book = trio.Path(tmp_path / "server" / "host-volumes.json")
        await book.write_text("{not json")
        async with running_agent(tmp_path, dev_mode=False) as r:
            aside = [p.name for p in await trio.Path(tmp_path / "server").iterdir()
                     if p.name.startswith("host-volumes.json.unreadable-")]
            assert len(aside) == 1
            # The node still offers what it made, and the book adopts it back from the node.
            node = (await r.client.get(f"/v1/node/{r.agent.node.id}")).json()
            assert node["HostVolumes"]["data"]["ID"] == vol["ID"]
            adopted = await r.client.get(f"/v1/volume/host/{vol['ID']}")
            assert adopted.status_code == 200
            assert adopted.json()["State"] == "ready"


async def test_a_volume_the_node_made_but_the_book_missed_is_adopted(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path, dev_mode=False) as r:
            vol = (await r.client.put("/v1/volume/host/create", json=_spec(
                Parameters={"mode": "0750"}))).json()["Volume"]
        # As an agent killed after the node's step and before the book's write.
        await trio.Path(tmp_path / "server" / "host-volumes.json").write_text('{"volumes":[]}')
        async with running_agent(tmp_path, dev_mode=False) as r:
            c = r.client
            got = await c.get(f"/v1/volume/host/{vol['ID']}")
            assert got.status_code == 200, got.text
            adopted = got.json()
            for key in ("Name", "Namespace", "PluginID", "NodeID", "NodePool", "HostPath",
                        "Parameters", "RequestedCapabilities"):
                assert adopted[key] == vol[key], key
            assert adopted["State"] == "ready"
            listed = (await c.get("/v1/volumes", params={"type": "host"})).json()
            assert [v["ID"] for v in listed] == [vol["ID"]]
            assert (await c.delete(f"/v1/volume/host/{vol['ID']}")).status_code == 200
            assert not await trio.Path(vol["HostPath"]).exists()
            again = await c.put("/v1/volume/host/create", json=_spec())
            assert again.status_code == 200, again.text
        async with running_agent(tmp_path, dev_mode=False) as r:  # the delete held
            listed = (await r.client.get("/v1/volumes", params={"type": "host"})).json()
            assert [v["ID"] for v in listed] == [again.json()["Volume"]["ID"]]


async def test_a_plugin_that_cannot_start_is_skipped_and_named_when_it_fails(
        tmp_path: Path) -> None:
    plugins = trio.Path(tmp_path / "host_volume_plugins")
    await plugins.mkdir()
    await (plugins / "noshebang").write_text('echo \'{"version": "1"}\'\n')
    await (plugins / "later").write_text(PLUGIN)
    for name in ("noshebang", "later"):
        await (plugins / name).chmod(0o755)
    with trio.fail_after(30):
        async with running_agent(tmp_path) as r:
            c = r.client
            attrs = (await c.get(f"/v1/node/{r.agent.node.id}")).json()["Attributes"]
            assert "plugins.host_volume.noshebang.version" not in attrs
            assert attrs["plugins.host_volume.later.version"] == "1.2.3"
            # Fingerprinted, then made unstartable: the create names the plugin and the error.
            await (plugins / "later").write_text("echo no shebang\n")
            failed = await c.put("/v1/volume/host/create", json=_spec(PluginID="later"))
            assert failed.status_code == 500
            assert failed.text == (f'error running plugin "later" create: fork/exec '
                                   f'{plugins / "later"}: Exec format error')
            assert (await c.get("/v1/volumes", params={"type": "host"})).json() == []
            # The name is free again.
            made = await c.put("/v1/volume/host/create", json=_spec())
            assert made.status_code == 200, made.text


async def test_a_volume_of_another_node_goes_only_with_force(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path, dev_mode=False) as r:
            vol = (await r.client.put("/v1/volume/host/create", json=_spec())).json()["Volume"]
        # As a book restored from another agent's snapshot: the volume is another node's.
        book = trio.Path(tmp_path / "server" / "host-volumes.json")
        await book.write_text((await book.read_text()).replace(
            vol["NodeID"], "9d8e7f6a-5b4c-4d3e-8f2a-1b0c9d8e7f6a"))
        await trio.Path(tmp_path / "client" / "host_volumes" / f"{vol['ID']}.json").unlink()
        async with running_agent(tmp_path, dev_mode=False) as r:
            c = r.client
            refused = await c.delete(f"/v1/volume/host/{vol['ID']}")
            assert (refused.status_code, refused.text) == (
                409, "volume cannot be removed from unknown node without force=true")
            bad = await c.delete(f"/v1/volume/host/{vol['ID']}", params={"force": "yes"})
            assert (bad.status_code, bad.text) == (400, "invalid force value")
            forced = await c.delete(f"/v1/volume/host/{vol['ID']}", params={"force": "true"})
            assert forced.status_code == 200, forced.text
            assert (await c.get(f"/v1/volume/host/{vol['ID']}")).status_code == 404
            assert await trio.Path(vol["HostPath"]).is_dir()  # no node's plugin ran
