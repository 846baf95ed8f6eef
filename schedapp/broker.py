"""kombu's file-system transport (the embedded broker of `./bin/run`), with each message
written whole before a consumer can see it.

kombu creates a message's file under its final name and only then writes the bytes. A
worker polling the folder may take the file (a rename) in between, read it empty, and
end with a JSON decoding error. Here the message is written to a temporary file in the
same folder, under a name no queue matches, and renamed into place: a rename is atomic,
so a consumer finds the whole message or nothing.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from time import monotonic_ns

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue`: written to a temporary file, then renamed."""
        # Consumers take files in name order: nanoseconds, zero-padded, keep a producer's
        # messages in order (kombu's whole milliseconds let a uuid order those within one).
        name = f"{monotonic_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        try:
            # The temporary name holds no ".<queue>.msg": no consumer, count or purge
            # takes it for a message.
            fd, staging = tempfile.mkstemp(prefix=".incoming-", dir=self.data_folder_out)
            with os.fdopen(fd, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(staging, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
