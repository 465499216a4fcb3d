"""Separate networks on one machine, from Linux network namespaces: a cut is a link set down.

`Nets` builds a private *hub* namespace that holds one bridge per network, and one namespace
per node, joined to the networks it is on by veth pairs (the hub's end on the bridge, the
node's end with a private address). Nothing is added to the namespace the caller runs in, so
addresses can never clash with the host's, and two `Nets` never see each other.

    nets = Nets("ha", {"etcd": "10.29.1.0/24", "workers": "10.29.2.0/24"})
    a = nets.node("sup-a", ["etcd", "workers"])       # a.addr["workers"] == "10.29.2.1"
    nets.popen(a, ["corral-supervisor", "run", ...])  # runs inside sup-a's namespace
    nets.cut(a, "workers")                            # its link to the workers' network down
    nets.heal(a, "workers")
    nets.call(a, fn)                                  # fn() on a thread inside sup-a's namespace
    nets.close()                                      # the namespaces, bridges, links: gone

A link set down drops every packet both ways, as a dead switch port does: TCP sees nothing
(no reset), retransmits, and delivers what it held once the link is up again if neither end
gave the connection up meanwhile. Needs root (`ip netns`): `unavailable()` says why not.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_made = 0  # Nets made by this process: part of each one's namespace names


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns)"
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns cannot run: {exc}"
    return None if out.returncode == 0 else f"ip netns fails: {out.stderr.strip()}"


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def enter(namespace: str) -> None:
    """Move the calling *thread* into ``namespace`` (the sockets it makes from then on, and
    the threads it starts, are there; the rest of the process is not)."""
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass
class Node:
    name: str
    namespace: str
    addr: dict[str, str] = field(default_factory=dict)  # network -> its address there
    links: dict[str, str] = field(default_factory=dict)  # network -> the hub's end of its veth


class Nets:
    def __init__(self, tag: str, networks: dict[str, str]) -> None:
        global _made
        _made += 1
        self.prefix = f"c{tag}{os.getpid()}x{_made}"
        self.hub = f"{self.prefix}-hub"
        self.networks = {n: ipaddress.ip_network(cidr) for n, cidr in networks.items()}
        self._hosts = {n: net.hosts() for n, net in self.networks.items()}
        self.nodes: list[Node] = []
        self._namespaces: list[str] = []
        self._add_namespace(self.hub)
        try:
            for i in range(len(self.networks)):
                _ip("-n", self.hub, "link", "add", f"br{i}", "type", "bridge")
                _ip("-n", self.hub, "link", "set", f"br{i}", "up")
        except Exception:
            self.close()
            raise

    def _add_namespace(self, namespace: str) -> None:
        _ip("netns", "add", namespace)
        self._namespaces.append(namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")

    def node(self, name: str, networks: list[str]) -> Node:
        """A namespace of its own, on ``networks`` (each gets the next free address)."""
        node = Node(name, f"{self.prefix}-{len(self.nodes)}")
        self._add_namespace(node.namespace)
        self.nodes.append(node)
        for network in networks:
            i = list(self.networks).index(network)
            hub_end = f"n{len(self.nodes) - 1}b{i}"  # names are per namespace: short is fine
            _ip("-n", self.hub, "link", "add", hub_end, "type", "veth", "peer", "name",
                f"eth{i}", "netns", node.namespace)
            _ip("-n", self.hub, "link", "set", hub_end, "master", f"br{i}", "up")
            addr = str(next(self._hosts[network]))
            prefix = self.networks[network].prefixlen
            _ip("-n", node.namespace, "addr", "add", f"{addr}/{prefix}", "dev", f"eth{i}")
            _ip("-n", node.namespace, "link", "set", f"eth{i}", "up")
            node.addr[network], node.links[network] = addr, hub_end
        return node

    def cut(self, node: Node, network: str) -> None:
        """``node`` can no longer reach anyone on ``network``, nor be reached."""
        _ip("-n", self.hub, "link", "set", node.links[network], "down")

    def heal(self, node: Node, network: str) -> None:
        _ip("-n", self.hub, "link", "set", node.links[network], "up")

    def command(self, node: Node, args: list[str]) -> list[str]:
        """``args`` as a command that runs inside ``node``'s namespace (its pid is the
        command's own: `ip netns exec` execs it)."""
        return ["ip", "netns", "exec", node.namespace, *args]

    def call(self, node: Node, fn: Callable[[], T], timeout: float = 60.0) -> T:
        """``fn()`` on a new thread inside ``node``'s namespace; its result, or its exception."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                enter(node.namespace)
                box["value"] = fn()
            except BaseException as exc:  # handed back to the caller
                box["error"] = exc

        t = threading.Thread(target=run, name=f"netns-{node.name}", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} in {node.name} took over "
                               f"{timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def close(self) -> None:
        """Delete every namespace (their links and bridges go with them). Processes still
        running in one keep it alive unnamed: stop them first."""
        for namespace in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True,
                           timeout=20)
        self._namespaces.clear()

    def __enter__(self) -> Nets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
