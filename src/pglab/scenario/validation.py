"""Validation with one-line errors: a raw scenario table -> a Scenario, or BadInput.

Every error names the file, the dotted key, the value and what was expected, on one
line; an unknown key gets a did-you-mean from the model's own field names.
"""

from __future__ import annotations

from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from pglab.errors import BadInput, did_you_mean
from pglab.scenario.model import Scenario

_EXPECTED = {
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
}


def fields_at(path: tuple[str, ...]) -> list[str] | None:
    """Field names of the model at a dotted path, or None where any key is allowed."""
    model: type[BaseModel] = Scenario
    parts = list(path)
    while parts:
        info = model.model_fields.get(parts.pop(0))
        if info is None:
            return None
        annotation = info.annotation
        value_type = get_args(annotation)[-1] if get_origin(annotation) is dict else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif isinstance(value_type, type) and issubclass(value_type, BaseModel) and parts:
            parts.pop(0)  # a table of models such as [nodes.standby1]: any key, known fields
            model = value_type
        elif (get_origin(annotation) is list and isinstance(item := get_args(annotation)[0],
                                                             type)
              and issubclass(item, BaseModel) and parts and parts[0].isdigit()):
            parts.pop(0)  # an array of tables such as [[network.links]]: an entry's index
            model = item
        else:
            return None
    return list(model.model_fields)


def _format_value(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value).lower() if isinstance(
        value, bool
    ) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(err: Any, where: str) -> str:
    loc = tuple(str(p) for p in err["loc"])
    key = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        siblings = fields_at(loc[:-1]) or []
        prefix = "".join(f"{p}." for p in loc[:-1])
        return f"{where}: unknown key '{key}'{did_you_mean(loc[-1], siblings, prefix)}"
    if kind == "missing":
        return f"{where}: missing key '{key}'"
    shown = err.get("input")
    value = _format_value(shown)
    ctx = err.get("ctx") or {}
    if kind == "value_error":
        expected = str(ctx.get("error", err["msg"]))
    elif kind == "literal_error":
        expected = f"expected one of {ctx.get('expected', '')}"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤",
                "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        expected = f"expected a number {sign} {bound}"
    elif kind == "string_pattern_mismatch":
        expected = "expected lowercase letters, digits and '-' (like 'checkpoint-storm')"
    else:
        expected = _EXPECTED.get(kind, str(err["msg"]).lower())
    if isinstance(shown, dict):  # the message names the offending entry itself
        return f"{where}: {key}: {expected}"
    return f"{where}: {key} = {value} is not valid: {expected}"


def validate(raw: dict[str, Any], where: str) -> Scenario:
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        message = _describe(errors[0], where)
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        raise BadInput(message) from None
    check_connection_path(scenario, where)
    check_network(scenario, where)
    return scenario


def check_connection_path(scenario: Scenario, where: str) -> None:
    """workload.path against the tables it depends on (the model checks each table alone);
    here, so that a matrix with a bad point fails before its first run."""
    path, topology = scenario.workload.path, scenario.topology
    if path == "pooler" and topology.pooler == "none":
        raise BadInput(f"{where}: workload.path = 'pooler' needs a pooler: add [topology] "
                       "pooler = 'pgbouncer'")
    if path != "unix":
        scenario.require_local(where, f"workload.path = '{path}'",
                               "server.dsn says how to reach a server pglab did not start")
    if path == "tcp" and scenario.workload.on == "standbys":
        raise BadInput(f"{where}: workload.path = 'tcp' reaches the primary only; it cannot "
                       "be used with workload.on = 'standbys'")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g}ms"


def _no_host_hint(scenario: Scenario, name: str, hosts: list[str]) -> str:
    """Why a link's host does not exist: the pooler's own host when the pooler is
    elsewhere or absent, else a did-you-mean."""
    if name != "pooler":
        return did_you_mean(name, hosts)
    if scenario.topology.pooler == "none":
        return " (a pooler's host exists with topology.pooler = 'pgbouncer')"
    return (" (topology.pooler_host = 'primary': the pooler runs on the primary's host, "
            "its link to the clients is ['primary', 'client'])")


def check_network(scenario: Scenario, where: str) -> None:
    """[network] against the topology (the model checks each link alone): every link
    joins two hosts of this topology, once; what separate hosts cannot do yet."""
    network = scenario.network
    if network.hosts == "shared":
        if network.links:
            raise BadInput(f"{where}: network.links needs network.hosts = 'separate' (with "
                           "'shared' every node talks over this host's loopback)")
        return
    topo, workload = scenario.topology, scenario.workload
    scenario.require_local(where, "network.hosts = 'separate'",
                           "pglab puts on hosts of their own only servers it starts")
    if workload.path == "unix":
        via = "'pooler' (through the pooler)" if topo.pooler != "none" else "'tcp'"
        raise BadInput(f"{where}: workload.path = 'unix' cannot be used with "
                       "network.hosts = 'separate': the clients' host reaches the primary "
                       f"over its link, workload.path = {via}")
    hosts = scenario.host_names()
    seen: dict[frozenset[str], int] = {}
    for index, link in enumerate(network.links):
        key = f"network.links[{index}]"
        for name in link.between:
            if name not in hosts:
                raise BadInput(f"{where}: {key}.between = {link.between}: no host '{name}' in "
                               f"this topology{_no_host_hint(scenario, name, hosts)}; "
                               f"hosts: {', '.join(hosts)}")
        pair = frozenset(link.between)
        if pair in seen:
            raise BadInput(f"{where}: {key}.between = {link.between}: the same two hosts as "
                           f"network.links[{seen[pair]}]; one link per pair")
        seen[pair] = index
        if link.jitter > link.rtt:
            raise BadInput(f"{where}: {key}.jitter = '{_ms(link.jitter)}' is larger than "
                           f"rtt = '{_ms(link.rtt)}': expected at most the rtt (each way "
                           "adds rtt/2 ± jitter/2, never less than nothing)")
