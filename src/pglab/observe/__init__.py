"""Field mode: `pglab observe`, read-only telemetry of a server pglab did not start.

One results folder (`source.kind = "observe"`) from the same telemetry runner, sink and
database probes a lab run uses, plus what only the field needs: read-only sessions, one
connection per node (`target`), a throughput series without a client (`throughput`,
`series`), the OS of remote hosts from node_exporter (`nodeexporter`, `exporter_probe`)
and the server log from a file, SQL or a command (`logsource`). `run` puts them together.
"""
