"""The scenario contract: what is accepted, and the one-line errors for what is not."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from pglab.driver_traits import DEFAULT_DRIVER, DRIVER_TRAITS
from pglab.errors import BadInput
from pglab.scenario import Workload, load, load_text
from pglab.scenario.builtin import builtin_names, load_builtin
from pglab.scenario.overrides import parse_override, toml_value

BASE = 'name = "t"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE + "[workload]\nclinets = 3", "unknown key 'workload.clinets' (did you mean "
                                           "'workload.clients'?)"),
        (BASE + "[workloud]\nscale = 1", "unknown key 'workloud' (did you mean 'workload'?)"),
        (BASE + '[workload]\nscale = "ten"', "workload.scale = 'ten' is not valid: expected a "
                                              "whole number"),
        (BASE + "[workload]\nclients = 0", "workload.clients = 0 is not valid"),
        (BASE + "[workload]\nclients = -4", "workload.clients = -4 is not valid"),
        (BASE + "[workload]\nclients = [1, 0]", "workload.clients = [1, 0] is not valid"),
        (BASE + '[workload]\nduration = "5 minutes"', "expected a duration like '60s'"),
        (BASE + '[workload]\nduration = "1.5s"', "expected a whole number of seconds"),
        (BASE + '[workload]\nmix = ["tpcb-lik"]', "did you mean 'tpcb-like'?"),
        (BASE + '[workload]\nmix = ["tpcb-like@x"]', "expected NAME or NAME@WEIGHT"),
        (BASE + "[workload]\nrate = -1", "workload.rate = -1 is not valid: expected a number ≥ 0"),
        (BASE + '[server]\ntarget = "remote"', "server.target = 'remote' is not valid: expected "
                                                "one of 'local' or 'dsn'"),
        (BASE + "[server]\ninitdb = { wal_segsize_mb = 3 }", "expected a power of 2"),
        (BASE + '[topology]\nsynchronous = "yes"', "expected 'off', 'on' or 'any:K'"),
        ('name = "Bad Name"', "name = 'Bad Name' is not valid"),
        ("[workload]\nscale = 1", "missing key 'name'"),
        (BASE + "[workload\n", "invalid TOML"),
        (BASE + "[server.settings]\nshared_buffers = 1GB  # a quarter", "invalid TOML: Expected "
         "newline or end of document after a statement (at line 3, column 19) (a value with a "
         'unit is a string: shared_buffers = "1GB")'),
        (BASE + "[telemetry]\nwait_sampling_hz = 1000", "expected a number ≤ 100"),
        (BASE + '[envelope]\ndisk_profile = "cloud-sdd:300GB"', "envelope.disk_profile = "
         "'cloud-sdd:300GB' is not valid: unknown disk profile 'cloud-sdd' (did you mean "
         "'cloud-ssd'?)"),
        (BASE + '[envelope]\ndisk_profile = "cloud-ssd"', "expected 'cloud-ssd:SIZE'"),
        (BASE + '[envelope]\ndisk_profile = "local-nvme:1TB"', "takes no size"),
        (BASE + '[envelope]\ncpuset = "0-"', "envelope.cpuset = '0-' is not valid: expected "
                                              "CPU numbers"),
        (BASE + '[envelope]\nmemory = "lots"', "envelope.memory = 'lots' is not valid: "
                                                "expected a size"),
        (BASE + '[envelope]\nmemory = "8MB"', "expected a size of at least 32MB"),
        (BASE + "[envelope]\ncpus = 0", "envelope.cpus = 0 is not valid: expected a number > 0"),
        (BASE + "[envelope]\ndisk = { write_mbps = -1 }", "envelope.disk.write_mbps = -1 is not "
                                                         "valid"),
        (BASE + "[envelope]\ndisk = { write_mpbs = 1 }", "unknown key 'envelope.disk.write_mpbs'"
                                                        " (did you mean 'envelope.disk.write_mbps"),
        (BASE + "[envelope]\ndisks = 1", "did you mean 'envelope.disk'"),
        (BASE + "[kernel]\nvm.dirty_ration = 5", "kernel: unknown kernel knob 'vm.dirty_ration' "
                                                 "(did you mean 'vm.dirty_ratio'?)"),
        (BASE + '[kernel]\ntransparent_hugepage = "off"', "kernel: 'transparent_hugepage' = "
                                                          "'off': expected one of"),
        (BASE + "[kernel]\nvm.swappiness = 300", "'vm.swappiness' = 300: expected a whole "
                                                 "number from 0 to 200"),
        (BASE + "kernel = 5", "kernel = 5 is not valid: expected a table"),
    ],
)
def test_bad_scenarios_get_one_line_errors(text: str, expected: str) -> None:
    with pytest.raises(BadInput) as info:
        load_text(text, "s.toml")
    message = str(info.value)
    assert message.startswith("s.toml: ")
    assert expected in message
    assert "\n" not in message


def test_defaults_follow_the_contract() -> None:
    scenario = load_text(BASE, "s.toml").scenario
    assert scenario.server.target == "local"
    assert scenario.workload.mix == ["tpcb-like"]
    assert scenario.workload.clients == [8]
    assert scenario.workload.duration == 60.0
    assert scenario.workload.warmup == 10.0
    assert scenario.telemetry.wait_sampling_hz == 10


def test_overrides_parse_toml_values_and_bare_words() -> None:
    loaded = load_text(BASE, "s.toml", ["workload.clients=32", "server.settings.fsync=off",
                                        "workload.duration=5m", "server.settings.work_mem=8MB"])
    scenario = loaded.scenario
    assert scenario.workload.clients == [32]
    assert scenario.server.settings == {"fsync": "off", "work_mem": "8MB"}
    assert scenario.workload.duration == 300.0


def test_tables_and_lists_pass_through_set_as_tune_writes_them() -> None:
    """A tune pins a [matrix] point (a device table, a list of faults) with --set: what
    toml_value writes, --set reads back unchanged; a pasted JSON object is read too."""
    device = {"write_mbps": 8, "latency": "3ms"}
    faults = [{"at": "1s", "action": "pause-standby", "node": "standby1", "duration": "2s"}]
    for key, value in (("storage.device", device), ("faults", faults),
                       ("server.settings.application_name", 'say "hi"'),
                       ("workload.clients", [1, 2]), ("server.settings.x", {"a.b": 1.5})):
        assert parse_override(f"{key}={toml_value(value)}") == (key, value)
    assert parse_override('storage.device={"write_mbps": 8}') == ("storage.device",
                                                                  {"write_mbps": 8})
    assert parse_override("storage.device={write_mbps") == ("storage.device",
                                                            "{write_mbps")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("workload.clinets=3", "--set workload.clinets=3: unknown key 'workload.clinets' "
                               "(did you mean 'workload.clients'?)"),
        ("novalue", "expected KEY=VALUE"),
        ("workload.clients=0", "workload.clients = 0 is not valid"),
    ],
)
def test_bad_overrides(override: str, expected: str) -> None:
    with pytest.raises(BadInput, match=None) as info:
        load_text(BASE, "s.toml", [override])
    assert expected in str(info.value)


def test_client_list_makes_a_sweep_and_matrix_multiplies_it() -> None:
    text = BASE + ('[workload]\nclients = [1, 4]\n'
                   '[matrix]\n"server.settings.wal_init_zero" = ["on", "off"]\n')
    variants = load_text(text, "s.toml").variants
    assert [(v.overrides["server.settings.wal_init_zero"], v.clients) for v in variants] == [
        ("on", 1), ("on", 4), ("off", 1), ("off", 4)]
    assert variants[3].scenario.server.settings["wal_init_zero"] == "off"
    assert all(v.scenario.matrix == {} for v in variants)


def test_single_run_has_no_overrides() -> None:
    variants = load_text(BASE, "s.toml").variants
    assert len(variants) == 1 and variants[0].overrides == {}


def test_matrix_key_is_checked() -> None:
    with pytest.raises(BadInput, match=r"unknown key 'workload\.sacle'"):
        load_text(BASE + '[matrix]\n"workload.sacle" = [1, 2]\n', "s.toml")


def test_named_mix_and_weights_expand() -> None:
    text = BASE + '[workload]\nmix = ["read-intensive"]\n'
    workload = load_text(text, "s.toml").scenario.workload
    assert workload.expanded_mix() == [("select-only", 80), ("tpcb-like", 20)]
    assert not workload.is_read_only()
    ro = load_text(BASE + '[workload]\nmix = ["select-only@3"]\n', "s.toml").scenario.workload
    assert ro.expanded_mix() == [("select-only", 3)] and ro.is_read_only()


def test_script_paths_are_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(BASE + '[workload]\nscripts = ["my.sql@2"]\n')
    with pytest.raises(BadInput, match=r"workload\.scripts: 'my\.sql' not found"):
        load(tmp_path / "s.toml")
    (tmp_path / "my.sql").write_text("SELECT 1;\n")
    assert load(tmp_path / "s.toml").scenario.workload.script_files() == [("my.sql", 2)]


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such scenario file"):
        load(tmp_path / "nope.toml")
    with pytest.raises(BadInput, match="is a directory"):
        load(tmp_path)


def test_builtin_scenarios_are_valid() -> None:
    assert "demo" in builtin_names()
    for name in builtin_names():
        assert load_builtin(name).scenario.name == name


def test_zfs_recordsize_data_is_more_than_twice_every_cache_on_its_path() -> None:
    """The ZFS guide's 8K/16K difference is about records read from and written back to
    the disk: with the data in a cache (the built-in's scale 20 once fitted in memory
    several times over, and zfs-fuse's block cache under the pool is bounded by nothing),
    the A/B measures zfs-fuse's CPU instead. At most half the data may fit in all the
    caches together: shared_buffers and the FUSE page cache (both in the memory
    envelope), zfs-fuse's ARC and vdev cache; and no block cache under the pool."""
    from pglab.storage.zfs import ARC_MAX_MB, DAEMON_ARGS
    from pglab.units import parse_size

    scenario = load_builtin("zfs-recordsize").scenario
    # pgbench: about 15 MB a scale unit (the guide's scale 1000 is 15 GB)
    data = scenario.workload.scale * 15 * 2**20
    envelope = scenario.envelope.memory
    assert envelope is not None, "without a memory envelope the page cache takes the host's"
    assert parse_size(str(scenario.server.settings["shared_buffers"])) < envelope
    vdev_cache = 10 * 2**20  # zfs-fuse's default --vdev-cache-size
    assert data >= 2 * (envelope + ARC_MAX_MB * 2**20 + vdev_cache)
    assert "--disable-block-cache" in DAEMON_ARGS
    assert DAEMON_ARGS[DAEMON_ARGS.index("--max-arc-size") + 1] == str(ARC_MAX_MB)


def test_envelope_and_kernel_tables() -> None:
    text = (BASE + '[envelope]\ncpus = 0.5\ncpuset = "0"\nmemory = "1GB"\n'
            'disk_profile = "cloud-ssd:300GB"\ndisk = { write_mbps = 10 }\n'
            '[kernel]\n"vm.dirty_ratio" = 40\nvm.dirty_background_bytes = "64MB"\n')
    scenario = load_text(text, "s.toml", ["kernel.vm.swappiness=10"]).scenario
    assert scenario.envelope.memory == 1 << 30
    assert scenario.envelope.disk.write_mbps == 10
    assert scenario.envelope.disk.read_mbps is None  # not given: the profile's applies
    assert scenario.kernel == {"vm.dirty_ratio": 40, "vm.dirty_background_bytes": 64 << 20,
                               "vm.swappiness": 10}
    assert not scenario.envelope.is_unlimited()
    # an override of one of a ratio/bytes pair replaces the file's other one (the kernel
    # keeps one of them), in either TOML spelling of the file's key
    for written in ('"vm.dirty_ratio" = 40', "vm.dirty_ratio = 40"):
        pair = load_text(BASE + f"[kernel]\n{written}\n", "s.toml",
                         ["kernel.vm.dirty_bytes=64MB"]).scenario
        assert pair.kernel == {"vm.dirty_bytes": 64 << 20}
    with pytest.raises(BadInput, match="not both"):  # both in one file is still a mistake
        load_text(BASE + '[kernel]\n"vm.dirty_ratio" = 40\n"vm.dirty_bytes" = 1\n', "s.toml")
    assert load_text(BASE + '[envelope]\ndisk_profile = "local-nvme"', "s.toml").scenario \
        .envelope.is_unlimited()


def test_a_standby_fault_without_a_node_acts_on_the_only_standby() -> None:
    from pglab.lab.fault_actions import ACTIONS
    from pglab.lab.faults import check_faults
    from pglab.scenario import STANDBY_ACTIONS

    assert set(STANDBY_ACTIONS) == {a.name for a in ACTIONS if a.kind.nodes == "standby"}
    fault = '[[faults]]\nat = "1s"\naction = "pause-standby"\nduration = "2s"\n'
    one = load_text(BASE + "[topology]\nstandbys = 1\n" + fault, "s.toml").scenario
    assert one.faults[0].node == "standby1"
    check_faults(one, "s.toml")
    two = load_text(BASE + "[topology]\nstandbys = 2\n" + fault, "s.toml").scenario
    with pytest.raises(BadInput, match=r"acts on a standby: name it with node "
                                       r"\(standby1, standby2\)"):
        check_faults(two, "s.toml")
    named = load_text(BASE + "[topology]\nstandbys = 1\n" + fault.replace(
        'duration', 'node = "primary"\nduration'), "s.toml").scenario
    with pytest.raises(BadInput, match="acts on a standby, not on 'primary'"):
        check_faults(named, "s.toml")


SYSBENCH = BASE + '[workload]\ndriver = "sysbench"\n'


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('test = "oltp_read_wirte"', "workload.test = 'oltp_read_wirte' is not valid: unknown "
                                     "sysbench test 'oltp_read_wirte' (did you mean "
                                     "'oltp_read_write'?)"),
        ('test = "mine.lua"', "workload.test: 'mine.lua' not found (looked for "),
        ("scale = 10", "workload: 'scale' is a pgbench key, and driver = 'sysbench'"),
        ("clients = 4\njobs = 2", "'clients', 'jobs' are pgbench keys, and driver = 'sysbench'"),
        ("threads = [4, 0]", "workload.threads = [4, 0] is not valid: expected a whole number "
                             "of threads ≥ 1"),
        ('options = { "--range_selects" = "off" }', "'--range_selects' is not a sysbench "
                                                    "option name"),
        ('options = { "Range Selects" = "off" }', "is not a sysbench option name"),
        ("options = { threads = 4 }", "'threads' is set by pglab from workload.threads"),
        ('options = { pgsql-host = "db" }', "'pgsql-host': pglab connects sysbench"),
        ("percentile = 101", "workload.percentile = 101 is not valid: expected a number ≤ 100"),
        ("rate = 2.5", "rate = 2.5: sysbench --rate takes a whole number"),
        ("table_size = 0", "workload.table_size = 0 is not valid"),
    ],
)
def test_bad_sysbench_workloads_get_one_line_errors(body: str, expected: str,
                                                     tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SYSBENCH + body + "\n")
    with pytest.raises(BadInput) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message, message
    assert "\n" not in message


def test_sysbench_keys_are_refused_with_pgbench() -> None:
    with pytest.raises(BadInput, match="'test', 'threads' are sysbench keys, and driver = "
                                       "'pgbench'"):
        load_text(BASE + '[workload]\ntest = "oltp_insert"\nthreads = 4\n', "s.toml")


def test_sysbench_threads_sweep_like_clients(tmp_path: Path) -> None:
    (tmp_path / "my.lua").write_text("function event() end\n")
    path = tmp_path / "s.toml"
    path.write_text(SYSBENCH + 'test = "my.lua"\ntables = 8\ntable_size = 100000\n'
                    'threads = [25, 50, 100]\nduration = "5m"\nwarmup = "10s"\nrate = 0\n'
                    'percentile = 99\noptions = { range_selects = "off", skip_trx = true }\n'
                    '[matrix]\n"server.settings.fsync" = ["on", "off"]\n')
    loaded = load(path)
    workload = loaded.scenario.workload
    assert (workload.driver, workload.tables, workload.table_size, workload.percentile) == (
        "sysbench", 8, 100000, 99)
    assert workload.options == {"range_selects": "off", "skip_trx": True}
    assert [(v.overrides["server.settings.fsync"], v.clients) for v in loaded.variants] == [
        ("on", 25), ("on", 50), ("on", 100), ("off", 25), ("off", 50), ("off", 100)]
    assert loaded.variants[1].overrides["workload.threads"] == 50
    assert loaded.variants[1].scenario.workload.threads == [50]
    with pytest.raises(BadInput, match=r"matrix\.workload\.threads: use workload\.threads"):
        load_text(SYSBENCH + '[matrix]\n"workload.threads" = [1, 2]\n', "s.toml")


def test_connection_path_defaults_and_matrix() -> None:
    """workload.path: "unix" unless the topology has a pooler, which the clients have always
    gone through; a matrix over the three paths makes three variants."""
    assert load_text(BASE, "s.toml").scenario.workload.path == "unix"
    pooled = load_text(BASE + '[topology]\npooler = "pgbouncer"\n', "s.toml").scenario
    assert pooled.workload.path == "pooler"
    loaded = load_text(BASE + '[workload]\nmix = ["select-1"]\nclients = [1]\n'
                       '[topology]\npooler = "pgbouncer"\n'
                       '[matrix]\n"workload.path" = ["unix", "tcp", "pooler"]\n', "s.toml")
    assert [v.scenario.workload.path for v in loaded.variants] == ["unix", "tcp", "pooler"]
    assert loaded.scenario.workload.is_read_only()
    assert loaded.scenario.workload.expanded_mix() == [("select-1", 1)]
    sysbench = load_text(BASE + '[workload]\ndriver = "sysbench"\ntest = "select-1"\n'
                         'path = "tcp"\n', "s.toml").scenario.workload
    assert (sysbench.test, sysbench.path) == ("select-1", "tcp") and sysbench.is_read_only()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('[workload]\npath = "socket"', "workload.path = 'socket' is not valid: expected one "
                                        "of 'unix', 'tcp' or 'pooler'"),
        ('[workload]\npath = "pooler"', "workload.path = 'pooler' needs a pooler: add "
                                        "[topology] pooler = 'pgbouncer'"),
        ('[matrix]\n"workload.path" = ["unix", "pooler"]',
         "s.toml (variant {'workload.path': 'pooler', 'workload.clients': 8}): "
         "workload.path = 'pooler' needs a pooler"),
        ('[server]\ntarget = "dsn"\ndsn = "host=db"\n[workload]\npath = "tcp"',
         "workload.path = 'tcp' needs server.target = 'local'"),
        ('[topology]\nstandbys = 1\n[workload]\nmix = ["select-only"]\non = "standbys"\n'
         'path = "tcp"', "workload.path = 'tcp' reaches the primary only"),
    ],
)
def test_bad_connection_paths_get_one_line_errors(body: str, expected: str,
                                                  tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(BASE + body + "\n")
    with pytest.raises(BadInput) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(f"{path}")
    assert expected in message, message
    assert "\n" not in message


def test_every_driver_the_scenario_accepts_is_registered() -> None:
    from pglab.workload.drivers import DRIVERS

    # workload.driver is validated by the scenario model, which cannot import the
    # registry (the scenario comes before the lab and the load): the two lists must agree
    accepted = typing.get_args(Workload.model_fields["driver"].annotation)
    assert sorted(accepted) == sorted(DRIVERS) == sorted(DRIVER_TRAITS)
    assert Workload.model_fields["driver"].default == DEFAULT_DRIVER


def test_each_drivers_traits_name_workload_keys_of_its_own() -> None:
    """A driver's own keys are Workload fields no other driver reads, its client counts
    among them: the model refuses them with another driver, and a sweep varies them."""
    fields = set(Workload.model_fields)
    seen: set[str] = set()
    for traits in DRIVER_TRAITS.values():
        assert set(traits.keys) <= fields, traits.name
        assert not seen & set(traits.keys), traits.name
        seen |= set(traits.keys)
        assert traits.concurrency in traits.keys, traits.name
        workload = Workload(driver=traits.name)
        assert workload.concurrency == getattr(workload, traits.concurrency)
        assert workload.concurrency_key == f"workload.{traits.concurrency}"

