"""torchrun, with its rendezvous bound to the rendezvous address: `python ddp_launch.py
<torchrun arguments>` is `torchrun <torchrun arguments>`, except that on the rendezvous host
(--node-rank 0) the store torchrun creates listens on --master-addr only.

Why: torch's TCPStore listens on every interface unless it is handed a listening socket
(TCPStore's master_listen_fd), and torchrun has no option to hand it one. So this launcher
binds the socket to --master-addr:--master-port itself and gives it to the one TCPStore the
static rendezvous creates (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py,
the only listener of the rendezvous: the workers use that store too). Shipped with the
collection; no profile string is part of it."""

from __future__ import annotations

import ipaddress
import socket
import sys


def _value(args: list[str], flag: str) -> str:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    raise SystemExit(f"ddp_launch: {flag} is required")


def main() -> None:
    args = sys.argv[1:]
    addr, port = _value(args, "--master-addr"), int(_value(args, "--master-port"))
    if _value(args, "--node-rank") == "0":
        import torch.distributed.elastic.rendezvous.static_tcp_rendezvous as static

        family = socket.AF_INET6 if ipaddress.ip_address(socket.gethostbyname(addr) if ":" not in addr else addr).version == 6 \
            else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((addr, port))
        listener.listen(128)
        real = static.TCPStore

        def bound_store(host_name, store_port, *rest, **options):
            if store_port == port and len(rest) >= 2 and rest[1]:  # (world_size, is_master, ...): the server
                options["master_listen_fd"] = listener.fileno()
            return real(host_name, store_port, *rest, **options)

        static.TCPStore = bound_store
    from torch.distributed import run

    run.main(args)


if __name__ == "__main__":
    main()
