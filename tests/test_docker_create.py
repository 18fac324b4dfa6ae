"""The docker driver's pure parts: the task config schema as the jobspec validates it, the
plugin config, and the container-create body (drivers/docker/create.py) of many configs."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from yurt.runtime.client.drivers import capabilities
from yurt.runtime.client.drivers.configs import DockerAuth, DockerTaskConfig
from yurt.runtime.client.drivers.docker.create import (
    LABEL_ALLOC_ID,
    LABEL_ALLOC_ROOT,
    LABEL_TASK_ID,
    container_name,
    create_body,
    memory_limits,
)
from yurt.runtime.client.drivers.docker.images import ImageGC, registry_auth, split_reference
from yurt.runtime.client.drivers.docker.plugin import DockerPluginConfig, plugin_config
from yurt.runtime.client.drivers.limits import limits_for
from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.errors import DriverError, JobSpecError
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs import TaskDeviceNode, TaskMount

ROOT = Path("/var/yurt/allocs")
ALLOC = "0b1c2d3e-0000-4000-8000-000000000001"


def task(**over: Any) -> TaskConfig:
    values: dict[str, Any] = dict(
        id=f"{ALLOC}/web/0badcafe", name="web", alloc_id=ALLOC, job_id="shop",
        task_group="front", driver_config={"image": "img:1"},
        env={"NOMAD_JOB_NAME": "shop", "NOMAD_TASK_NAME": "web", "NOMAD_NAMESPACE": "default",
             "NOMAD_HOST_PORT_http": "23456", "NOMAD_PORT_http": "8080",
             "NOMAD_HOST_IP_http": "127.0.0.1", "NOMAD_ALLOC_DIR": f"{ROOT}/{ALLOC}/alloc"},
        alloc_dir=ROOT / ALLOC, task_dir=ROOT / ALLOC / "web",
        memory_mb=256, cpu_shares=500)
    values.update(over)
    return TaskConfig(**values)


def body(cfg: dict[str, Any] | None = None, plugin: dict[str, Any] | None = None,
         **over: Any) -> dict[str, Any]:
    config = msgspec.convert({"image": "img:1", **(cfg or {})}, DockerTaskConfig)
    return create_body(task(**over), config, plugin_config(plugin or {}), image="img:1")


# ---------------------------------------------------------------- the schema, via the jobspec

JOB = """
job "shop" {
  group "front" {
    task "web" {
      driver = "docker"
      config {
        %s
      }
    }
  }
}
"""


def config_of(block: str) -> dict[str, Any]:
    return dict(parse_job(JOB % block).task_groups[0].tasks[0].config)


def test_a_real_looking_docker_config_validates_and_converts() -> None:
    raw = config_of('''
        image = "redis:7"
        command = "redis-server"
        args = ["--port", "${NOMAD_PORT_db}"]
        ports = ["db"]
        labels { team = "cache" }
        mount {
          type = "tmpfs"
          target = "/scratch"
          tmpfs_options { size = 1000000 }
        }
        ulimit { nofile = "1024:2048" }
        logging {
          type = "json-file"
          config { max-size = "10m" }
        }
        sysctl = { "net.core.somaxconn" = "512" }
        image_pull_timeout = "2m"
    ''')
    cfg = msgspec.convert(raw, DockerTaskConfig)
    assert cfg.image == "redis:7"
    assert cfg.mount[0].type == "tmpfs"


@pytest.mark.parametrize(("block", "expected"), [
    ('command = "x"', "docker needs"),
    ('image = "x"\n portz = ["a"]', 'unknown field "portz"; did you mean "ports"?'),
    ('image = "x"\n image_pull_timeout = "soon"', "image_pull_timeout"),
    ('image = "x"\n privileged = "yes"', "privileged"),
    ('image = "x"\n port_map { http = 80 }', "port_map is not supported"),
    ('image = "x"\n mount {\n type = "nfs"\n target = "/x"\n }', "mount type must be"),
    ('image = "x"\n isolation = "hyperv"', "Windows"),
])
def test_bad_docker_configs_fail_validation_naming_the_field(block: str, expected: str) -> None:
    with pytest.raises(JobSpecError) as failed:
        config_of(block)
    assert expected in str(failed.value)


def test_plugin_config_defaults_and_refusals() -> None:
    config = plugin_config({})
    assert config.gc.image
    assert config.gc.image_delay == "3m"
    assert not config.volumes.enabled
    assert not config.allow_privileged
    assert "net_raw" not in config.allow_caps
    assert "chown" in config.allow_caps
    with pytest.raises(DriverError, match="allow_privilegd"):
        plugin_config({"allow_privilegd": True})
    with pytest.raises(DriverError, match="image_delay"):
        plugin_config({"gc": {"image_delay": "later"}})


# ---------------------------------------------------------------- the create body

def test_the_alloc_dir_env_labels_and_name_are_nomads() -> None:
    b = body()
    host = b["HostConfig"]
    task_dir = ROOT / ALLOC / "web"
    assert host["Binds"] == [f"{ROOT}/{ALLOC}/alloc:/alloc", f"{task_dir}/local:/local",
                             f"{task_dir}/secrets:/secrets",
                             f"{ROOT}/{ALLOC}/alloc/logs:/alloc/logs:ro"]
    env = dict(e.split("=", 1) for e in b["Env"])
    assert (env["NOMAD_ALLOC_DIR"], env["NOMAD_TASK_DIR"], env["NOMAD_SECRETS_DIR"]) == (
        "/alloc", "/local", "/secrets")
    assert b["Labels"] == {LABEL_ALLOC_ID: ALLOC, LABEL_ALLOC_ROOT: str(ROOT),
                           LABEL_TASK_ID: f"{ALLOC}/web/0badcafe"}
    assert host["RestartPolicy"] == {"Name": "no"}
    assert container_name(task()) == f"web-{ALLOC}"
    assert "Cmd" not in b
    assert "Entrypoint" not in b


def test_extra_labels_globs_add_nomads_labels_and_user_labels_stay() -> None:
    b = body({"labels": [{"team": "a"}, {"tier": "b"}]},
             {"extra_labels": ["job_*", "task_name"]})
    assert b["Labels"]["team"] == "a"
    assert b["Labels"]["tier"] == "b"
    assert b["Labels"]["com.hashicorp.nomad.job_name"] == "shop"
    assert b["Labels"]["com.hashicorp.nomad.job_id"] == "shop"
    assert b["Labels"]["com.hashicorp.nomad.task_name"] == "web"
    assert "com.hashicorp.nomad.namespace" not in b["Labels"]


def test_command_args_entrypoint_and_user() -> None:
    b = body({"command": "/bin/sh", "args": ["-c", "echo hi"], "entrypoint": ["/init"],
              "work_dir": "/srv"}, user="nobody")
    assert b["Cmd"] == ["/bin/sh", "-c", "echo hi"]
    assert b["Entrypoint"] == ["/init"]
    assert (b["WorkingDir"], b["User"]) == ("/srv", "nobody")
    assert body({"args": ["x"]})["Cmd"] == ["x"]
    with pytest.raises(DriverError, match="extra white space"):
        body({"command": " /bin/sh"})


@pytest.mark.parametrize(("memory", "memory_max", "hard", "expected"), [
    (256, 0, 0, (256, 0)),  # memory alone is the hard limit
    (256, 512, 0, (512, 256)),  # memory_max hard, memory soft
    (256, -1, 0, (0, 256)),  # no hard limit
    (256, 0, 1024, (1024, 256)),  # memory_hard_limit
    (256, 512, 1024, (1024, 256)),  # the greater hard limit
])
def test_memory_limits_are_nomads(memory: int, memory_max: int, hard: int,
                                  expected: tuple[int, int]) -> None:
    mib = 1024 * 1024
    assert memory_limits(hard, memory, memory_max) == (expected[0] * mib, expected[1] * mib)


@pytest.mark.parametrize(("memory", "memory_max", "cpu"),
                         [(256, 0, 0), (256, 512, 100), (256, -1, 300_000), (1, 0, 2)])
def test_docker_and_the_cgroup_drivers_share_limits_arithmetic(memory: int, memory_max: int,
                                                                cpu: int) -> None:
    """Without docker's own `memory_hard_limit`, a container gets what limits.py
    `limits_for` gives exec and raw_exec (no hard limit: -1 there, 0 in Docker's words)."""
    limits = limits_for(memory, memory_max, cpu)
    host = body(memory_mb=memory, memory_max_mb=memory_max, cpu_shares=cpu)["HostConfig"]
    assert (host["Memory"], host["MemoryReservation"], host["CpuShares"]) == (
        max(limits.memory_bytes, 0), limits.memory_soft_bytes, limits.cpu_shares)


def test_limits_reach_the_host_config() -> None:
    host = body(memory_mb=64, memory_max_mb=128, cpu_shares=300)["HostConfig"]
    assert (host["Memory"], host["MemoryReservation"], host["CpuShares"]) == (
        128 << 20, 64 << 20, 300)
    assert body(cpu_shares=0)["HostConfig"]["CpuShares"] == 2
    assert body(cpu_shares=300_000)["HostConfig"]["CpuShares"] == 262_144
    with pytest.raises(DriverError, match="exceed driver hard limit of 128 MB"):
        body({"memory_hard_limit": 128}, memory_mb=256)
    assert body({"pids_limit": 10})["HostConfig"]["PidsLimit"] == 10
    assert body({}, {"pids_limit": 50})["HostConfig"]["PidsLimit"] == 50
    with pytest.raises(DriverError, match="pids_limit cannot be greater"):
        body({"pids_limit": 100}, {"pids_limit": 50})


def test_ports_are_published_from_the_allocation_except_with_host_networking() -> None:
    b = body({"ports": ["http"], "network_mode": "bridge"})
    assert b["HostConfig"]["PortBindings"] == {
        "8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "23456"}],
        "8080/udp": [{"HostIp": "127.0.0.1", "HostPort": "23456"}]}
    assert set(b["ExposedPorts"]) == {"8080/tcp", "8080/udp"}
    host = body({"ports": ["http"], "network_mode": "host"})
    assert "PortBindings" not in host["HostConfig"]
    assert host["HostConfig"]["NetworkMode"] == "host"
    with pytest.raises(DriverError, match="Port 'db' not found, check network block"):
        body({"ports": ["db"], "network_mode": "bridge"})
    with pytest.raises(DriverError, match='network_mode "none"'):
        body({"ports": ["http"]})  # the default network here is none


def test_capabilities_within_allow_caps_with_nomads_message() -> None:
    assert body({}, {"allow_caps": ["chown", "kill"]})["HostConfig"]["CapDrop"] == sorted(
        {"audit_write", "dac_override", "fowner", "fsetid", "mknod", "net_bind_service",
         "setfcap", "setgid", "setpcap", "setuid", "sys_chroot", "net_raw"})
    assert plugin_config({}).allow_caps == sorted(capabilities.NOMAD_DEFAULTS)
    assert body({})["HostConfig"]["CapDrop"] == ["net_raw"]  # Nomad's defaults
    b = body({"cap_add": ["CAP_NET_BIND_SERVICE"], "cap_drop": ["mknod"]})
    assert b["HostConfig"]["CapAdd"] == ["net_bind_service"]
    assert b["HostConfig"]["CapDrop"] == ["mknod", "net_raw"]
    with pytest.raises(DriverError,
                       match="driver does not allow the following capabilities: sys_admin"):
        body({"cap_add": ["sys_admin"]})
    assert body({"cap_add": ["sys_admin"]}, {"allow_caps": ["all"]})["HostConfig"][
        "CapAdd"] == ["sys_admin"]
    assert body({"cap_drop": ["ALL"]})["HostConfig"]["CapDrop"] == ["all"]
    with pytest.raises(DriverError, match=r"^cap_add configured with capabilities not "
                                          r"supported by system: fly$"):
        body({"cap_add": ["chown", "fly"]}, {"allow_caps": ["all"]})
    with pytest.raises(DriverError, match=r"^cap_drop configured with capabilities not "
                                          r"supported by system: fly$"):
        body({"cap_drop": ["CAP_FLY"]})
    with pytest.raises(DriverError, match=r"^invalid docker plugin config: allow_caps "
                                          "configured with capabilities not supported by "
                                          r"system: fly$"):
        plugin_config({"allow_caps": ["chown", "fly"]})


def test_privileged_only_when_the_plugin_allows_it() -> None:
    with pytest.raises(DriverError, match="privileged mode is disabled"):
        body({"privileged": True})
    assert body({"privileged": True}, {"allow_privileged": True})["HostConfig"]["Privileged"]


def test_volumes_within_the_alloc_dir_always_elsewhere_only_when_enabled() -> None:
    task_dir = ROOT / ALLOC / "web"
    binds = body({"volumes": ["local/conf:/etc/app:ro"]})["HostConfig"]["Binds"]
    assert binds[-1] == f"{task_dir}/local/conf:/etc/app:ro"
    with pytest.raises(DriverError, match="volumes are not enabled; cannot mount host path"):
        body({"volumes": ["/etc:/host-etc"]})
    with pytest.raises(DriverError, match="volumes are not enabled"):
        body({"volumes": ["../../../etc:/x"]})
    binds = body({"volumes": ["/etc:/host-etc"]}, {"volumes": {"enabled": True}})[
        "HostConfig"]["Binds"]
    assert binds[-1] == "/etc:/host-etc"
    with pytest.raises(DriverError, match="invalid docker volume"):
        body({"volumes": ["/only-one-part"]}, {"volumes": {"enabled": True}})


def test_a_bind_source_whose_links_leave_the_alloc_dir_is_refused() -> None:
    """helper/escapingfs `ChildEscapesParentDir`: the check is of the resolved path."""
    task_dir = ROOT / ALLOC / "web"
    links = {f"{task_dir}/local/x": "/", f"{task_dir}/local/in": f"{task_dir}/local/data"}

    def resolve(path: str) -> str:
        return links.get(path, path)

    config = msgspec.convert({"image": "img:1", "volumes": ["local/x:/host"]},
                             DockerTaskConfig)
    with pytest.raises(DriverError, match="volumes are not enabled; cannot mount host path: "
                                          "'local/x:/host'"):
        create_body(task(), config, plugin_config({}), image="i", resolve=resolve)
    mount = msgspec.convert({"image": "img:1", "mount": [
        {"type": "bind", "source": "local/x", "target": "/host"}]}, DockerTaskConfig)
    with pytest.raises(DriverError, match="cannot mount host path: 'local/x'"):
        create_body(task(), mount, plugin_config({}), image="i", resolve=resolve)
    inside = msgspec.convert({"image": "img:1", "volumes": ["local/in:/d"]}, DockerTaskConfig)
    binds = create_body(task(), inside, plugin_config({}), image="i",
                        resolve=resolve)["HostConfig"]["Binds"]
    assert binds[-1] == f"{task_dir}/local/data:/d"  # the resolved path is what is bound


def test_a_real_symlink_to_the_hosts_root_is_refused(tmp_path: Path) -> None:
    alloc = tmp_path / ALLOC
    (alloc / "web" / "local" / "data").mkdir(parents=True)
    (alloc / "web" / "local" / "x").symlink_to("/")
    (alloc / "web" / "local" / "up").symlink_to("../../..")
    (alloc / "web" / "local" / "in").symlink_to("data")
    over = {"alloc_dir": alloc, "task_dir": alloc / "web"}
    for spec in ("local/x:/host", "local/up:/host", "local/x/etc:/etc-host"):
        config = msgspec.convert({"image": "img:1", "volumes": [spec]}, DockerTaskConfig)
        with pytest.raises(DriverError, match="volumes are not enabled; cannot mount host"):
            create_body(task(**over), config, plugin_config({}), image="i",
                        resolve=os.path.realpath)
    config = msgspec.convert({"image": "img:1", "volumes": ["local/in/new:/d"]},
                             DockerTaskConfig)
    binds = create_body(task(**over), config, plugin_config({}), image="i",
                        resolve=os.path.realpath)["HostConfig"]["Binds"]
    assert binds[-1] == f"{os.path.realpath(alloc)}/web/local/data/new:/d"


def test_mount_blocks_bind_tmpfs_volume() -> None:
    task_dir = ROOT / ALLOC / "web"
    mounts = body({"mount": [
        {"type": "bind", "source": "local/data", "target": "/data", "readonly": True,
         "bind_options": [{"propagation": "rslave"}]},
        {"type": "tmpfs", "target": "/scratch", "tmpfs_options": [{"size": 1000}]},
    ]})["HostConfig"]["Mounts"]
    assert mounts[0] == {"Type": "bind", "Target": "/data", "Source": f"{task_dir}/local/data",
                         "ReadOnly": True, "BindOptions": {"Propagation": "rslave"}}
    assert mounts[1]["TmpfsOptions"] == {"SizeBytes": 1000, "Mode": 0}
    with pytest.raises(DriverError, match='must be "" for tmpfs'):
        body({"mount": [{"type": "tmpfs", "source": "x", "target": "/t"}]})
    with pytest.raises(DriverError, match="volumes are not enabled"):
        body({"mount": [{"type": "volume", "source": "named", "target": "/v"}]})
    volume = body({"mount": [{"type": "volume", "source": "named", "target": "/v"}]},
                  {"volumes": {"enabled": True}})["HostConfig"]["Mounts"][0]
    assert volume["Source"] == "named"
    assert volume["VolumeOptions"]["NoCopy"] is False


def test_host_volume_mounts_and_devices_from_the_hooks() -> None:
    host = body({"devices": [{"host_path": "/dev/fuse"}]},
                mounts=[TaskMount(task_path="/data", host_path="/srv/vol", readonly=True)],
                devices=[TaskDeviceNode(task_path="/dev/x0", host_path="/dev/null",
                                        permissions="rw")])["HostConfig"]
    assert host["Mounts"] == [{"Type": "bind", "Source": "/srv/vol", "Target": "/data",
                               "ReadOnly": True, "BindOptions": {"Propagation": "rprivate"}}]
    assert host["Devices"] == [
        {"PathOnHost": "/dev/null", "PathInContainer": "/dev/x0", "CgroupPermissions": "rw"},
        {"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse", "CgroupPermissions": "rwm"}]


def test_the_rest_of_the_options_reach_the_body() -> None:
    b = body({"hostname": "h1", "extra_hosts": ["db:10.0.0.2"], "dns_servers": ["1.1.1.1"],
              "dns_search_domains": ["local"], "dns_options": ["ndots:1"],
              "ulimit": [{"nofile": "1024:2048"}, {"nproc": "64"}],
              "security_opt": ["no-new-privileges"], "sysctl": [{"net.core.somaxconn": "9"}],
              "init": True, "readonly_rootfs": True, "shm_size": 1 << 20, "tty": True,
              "interactive": True, "ipc_mode": "host", "pid_mode": "host",
              "healthchecks": [{"disable": True}], "cgroupns": "private",
              "logging": [{"type": "local", "config": [{"max-size": "1m"}]}]},
             {"allowed_modes": {"ipc": ["host"], "pid": ["h*"]}})
    host = b["HostConfig"]
    assert b["Hostname"] == "h1"
    assert b["Tty"]
    assert b["OpenStdin"]
    assert host["ExtraHosts"] == ["db:10.0.0.2"]
    assert host["Dns"] == ["1.1.1.1"]
    assert host["DnsSearch"] == ["local"]
    assert host["DnsOptions"] == ["ndots:1"]
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 1024, "Hard": 2048},
                               {"Name": "nproc", "Soft": 64, "Hard": 64}]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Sysctls"] == {"net.core.somaxconn": "9"}
    assert host["Init"]
    assert host["ReadonlyRootfs"]
    assert host["ShmSize"] == 1 << 20
    assert (host["IpcMode"], host["PidMode"]) == ("host", "host")
    assert host["CgroupnsMode"] == "private"
    assert b["Healthcheck"] == {"Test": ["NONE"]}
    assert "Healthcheck" not in body()
    assert host["LogConfig"] == {"Type": "local", "Config": {"max-size": "1m"}}
    assert body()["HostConfig"]["LogConfig"] == {"Type": "json-file", "Config": {}}
    with pytest.raises(DriverError, match="failed to parse ulimit"):
        body({"ulimit": {"nofile": "many"}})
    with pytest.raises(DriverError, match="runtime 'kata' is not allowed"):
        body({"runtime": "kata"})


def test_a_plugin_config_object_is_accepted_directly() -> None:
    config = msgspec.convert({"image": "x"}, DockerTaskConfig)
    assert create_body(task(), config, DockerPluginConfig(), image="sha256:ab",
                       default_network="bridge")["HostConfig"]["NetworkMode"] == "bridge"


# ---------------------------------------------------------------- images (pure parts)

@pytest.mark.parametrize(("image", "expected"), [
    ("redis", ("redis", "latest")),
    ("redis:7", ("redis", "7")),
    ("reg.example:5000/team/app", ("reg.example:5000/team/app", "latest")),
    ("reg.example:5000/team/app:2", ("reg.example:5000/team/app", "2")),
    ("app@sha256:abcd", ("app", "sha256:abcd")),
])
def test_image_references_split_as_nomads(image: str, expected: tuple[str, str]) -> None:
    assert split_reference(image) == expected


def test_registry_auth_is_a_header_only_with_credentials() -> None:
    assert registry_auth(None) == ""
    assert registry_auth(DockerAuth(server_address="r")) == ""
    header = registry_auth(DockerAuth(username="u", password="p", server_address="r"))
    assert json.loads(base64.urlsafe_b64decode(header)) == {
        "username": "u", "password": "p", "email": "", "serveraddress": "r"}


def test_image_gc_removes_after_the_delay_only_what_no_task_uses() -> None:
    gc = ImageGC(enabled=True, delay=180.0)
    gc.use("sha256:a", "t1")
    gc.use("sha256:a", "t2")
    gc.release("sha256:a", "t1", now=0.0)
    assert gc.next_due() is None  # t2 still uses it
    gc.release("sha256:a", "t2", now=10.0)
    assert gc.next_due() == 190.0
    assert gc.take_due(now=189.0) == []
    gc.use("sha256:a", "t3")  # used again before its time: no longer due
    assert gc.take_due(now=200.0) == []
    gc.release("sha256:a", "t3", now=300.0)
    assert gc.take_due(now=480.0) == ["sha256:a"]
    assert gc.take_due(now=999.0) == []
    off = ImageGC(enabled=False, delay=0.0)
    off.use("sha256:b", "t")
    off.release("sha256:b", "t", now=0.0)
    assert off.take_due(now=1.0) == []


def test_cpu_hard_limit_is_a_cfs_quota_of_the_tasks_share_of_the_node() -> None:
    config = msgspec.convert({"image": "x", "cpu_hard_limit": True}, DockerTaskConfig)
    cores = os.cpu_count() or 1
    host = create_body(task(cpu_shares=500), config, DockerPluginConfig(), image="x",
                       total_compute_mhz=cores * 1000)["HostConfig"]
    # driver.go: PercentTicks (500 of the node's MHz) × period × cores: half a core.
    assert (host["CpuPeriod"], host["CpuQuota"]) == (100_000, 50_000)
    with pytest.raises(DriverError, match="total compute"):
        create_body(task(), config, DockerPluginConfig(), image="x")


def test_namespace_modes_only_within_allowed_modes_or_with_privileged() -> None:
    with pytest.raises(DriverError, match='cannot apply "pid_mode" configuration'):
        body({"pid_mode": "host"})
    with pytest.raises(DriverError, match='cannot apply "uts_mode" configuration'):
        body({"uts_mode": "host"}, {"allowed_modes": {"pid": ["host"]}})
    assert body({"pid_mode": "host"}, {"allow_privileged": True})["HostConfig"][
        "PidMode"] == "host"
    assert body({"userns_mode": "host"}, {"allowed_modes": {"userns": ["*"]}})[
        "HostConfig"]["UsernsMode"] == "host"


@pytest.mark.parametrize(("mode", "docker"), [
    ("", "rprivate"), ("private", "rprivate"), ("host-to-task", "rslave"),
    ("bidirectional", "rshared")])
def test_a_volume_mounts_propagation_mode_is_dockers_bind_propagation(
        mode: str, docker: str) -> None:
    host = body({}, mounts=[TaskMount(task_path="/data", host_path="/srv/vol",
                                      propagation_mode=mode)])["HostConfig"]
    assert host["Mounts"][0]["BindOptions"] == {"Propagation": docker}


def test_an_unknown_propagation_mode_is_refused() -> None:
    with pytest.raises(DriverError, match='unknown propagation_mode "sideways"'):
        body({}, mounts=[TaskMount(task_path="/data", host_path="/srv/vol",
                                   propagation_mode="sideways")])


def test_reserved_cores_pin_the_container_unless_the_config_names_its_own() -> None:
    assert body({}, reserved_cores=[3, 1])["HostConfig"]["CpusetCpus"] == "1,3"
    assert body({"cpuset_cpus": "0"}, reserved_cores=[3])["HostConfig"]["CpusetCpus"] == "0"
    assert body({})["HostConfig"]["CpusetCpus"] == ""
