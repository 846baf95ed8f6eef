"""A local SMTP sink and a local webhook receiver, each on a thread of the test process:
what a notice's delivery sends goes through a real socket and is kept for the test."""

from __future__ import annotations

import json
import socketserver
import threading
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP for smtplib: greeting, EHLO, MAIL, RCPT, DATA, RSET, NOOP, QUIT."""

    def handle(self) -> None:
        self._send("220 sink ready")
        sender, recipients = "", []
        while line := self.rfile.readline():
            verb = line[:4].upper()
            if verb in (b"EHLO", b"HELO"):
                self._send("250 sink")
            elif verb == b"MAIL":
                sender, recipients = line[10:].strip().decode().strip("<>"), []
                self._send("250 ok")
            elif verb == b"RCPT":
                recipients.append(line[8:].strip().decode().strip("<>"))
                self._send("250 ok")
            elif verb == b"DATA":
                self._send("354 end with .")
                self.server.messages.append((sender, recipients, self._data()))
                self._send("250 queued")
            elif verb == b"QUIT":
                self._send("221 bye")
                return
            else:  # RSET, NOOP
                self._send("250 ok")

    def _data(self):
        lines = []
        while (line := self.rfile.readline()) not in (b".\r\n", b""):
            lines.append(line[1:] if line.startswith(b"..") else line)
        return message_from_bytes(b"".join(lines), policy=policy.default)

    def _send(self, text: str) -> None:
        self.wfile.write(text.encode() + b"\r\n")


class SmtpSink(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SmtpHandler)
        self.messages: list = []

    @property
    def port(self) -> int:
        return self.server_address[1]


class _WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        if status == 200:
            self.server.received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


class WebhookReceiver(ThreadingHTTPServer):
    """Answers each POST with the next status of `statuses` (200 when none is left) and
    keeps the JSON bodies it answered 200 to."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _WebhookHandler)
        self.received: list = []
        self.statuses: list[int] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/tempo"


def running(server):
    """Serve on a daemon thread; the caller shuts it down."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
