"""The network between a lab's hosts: network namespaces, links, their limits, partitions.

With `network.hosts = "separate"` each node and the load generator runs in a network
namespace of its own (`plan.py` says which, with what addresses; `hosts.py` makes them,
shapes and measures the links, partitions them, and removes them on every path or after a
kill -9; `measure.py` measures a link from pglab's own sockets).
"""
