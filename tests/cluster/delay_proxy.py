"""A TCP proxy that adds latency: every chunk is forwarded `delay_ms` after it arrived,
in each direction, in order (a link of 2 × delay_ms round trip). Stands in for `tc
netem delay` where the kernel has no netem.

    python -m tests.cluster.delay_proxy --listen 127.0.0.1:0 --target 127.0.0.1:5432 \
        --delay-ms 12.5

Prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys

CHUNK = 65536


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float):
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                break
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(CHUNK):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    finally:
        queue.put_nowait((loop.time() + delay, b""))
        await sender


async def _serve(listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
    async def connection(reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        for sock in (writer.get_extra_info("socket"), up_writer.get_extra_info("socket")):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _forward(reader, up_writer, delay),
            _forward(up_reader, writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(connection, *listen)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


class DelayProxy:
    """The proxy as a process of its own (it must not share a GIL with what it measures)."""

    def __init__(self, *, target: str, delay_ms: float, listen: str = "127.0.0.1:0") -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.delay_proxy", "--listen", listen]
            + ["--target", target, "--delay-ms", str(delay_ms)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--target", required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args()
    asyncio.run(_serve(_address(args.listen), _address(args.target), args.delay_ms / 1000))


if __name__ == "__main__":
    main()
