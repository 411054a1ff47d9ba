"""The pre-imported interpreter's check of each connection
(src/measure/hook/vramprobe_zygote.py, `_authorized`): the peer's uid
(SO_PEERCRED) and the sweep's secret. Plain Python, no torch:

    python3 tests/python/test_zygote_auth.py

With OTHER_UID set (as root), a second account that knows the secret is
refused too, for its uid alone.
"""
import json
import os
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src", "measure", "hook"))
import vramprobe_zygote as zygote  # noqa: E402

SECRET = "ab" * 32


def request(secret):
    body = {"argv": ["x.py"], "target": ["script", "x.py"], "cwd": "/", "env": {}, "pgid": 0}
    if secret is not None:
        body["secret"] = secret
    return json.dumps(body).encode() + b"\n"


class Authorized(unittest.TestCase):
    def serve_one(self, send):
        """What `_authorized` made of one connection whose client ran `send`."""
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sender = threading.Thread(target=send, args=(b,))
        sender.start()
        try:
            return zygote._authorized(a, SECRET)
        finally:
            sender.join()
            a.close()
            b.close()

    def test_the_secret_is_served_with_its_descriptors(self):
        served = self.serve_one(lambda s: socket.send_fds(s, [request(SECRET)], [0, 1, 2]))
        self.assertIsNotNone(served)
        body, fds = served
        self.assertEqual(body["argv"], ["x.py"])
        self.assertEqual(len(fds), 3)
        for fd in fds:
            os.close(fd)

    def test_no_secret_or_another_is_refused_and_its_descriptors_closed(self):
        before = len(os.listdir("/proc/self/fd"))
        for secret in (None, "", "cd" * 32, SECRET[:-1], 42):
            served = self.serve_one(lambda s, secret=secret: socket.send_fds(s, [request(secret)], [0, 1, 2]))
            self.assertIsNone(served, secret)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)

    def test_a_request_that_is_not_json_is_an_error_not_a_fork(self):
        with self.assertRaises(ValueError):
            self.serve_one(lambda s: s.sendall(b"not json\n"))

    @unittest.skipUnless(os.environ.get("OTHER_UID") and os.getuid() == 0, "needs root and OTHER_UID")
    def test_another_uid_is_refused_even_with_the_secret(self):
        other = int(os.environ["OTHER_UID"])
        with tempfile.TemporaryDirectory() as folder:
            os.chmod(folder, 0o777)  # reachable by anyone: only the uid check stands
            path = os.path.join(folder, "s.sock")
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            os.chmod(path, 0o777)
            server.listen(1)
            pid = os.fork()
            if pid == 0:
                try:
                    os.setgid(other)
                    os.setuid(other)
                    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    c.connect(path)
                    c.sendall(request(SECRET))
                    c.recv(1)
                finally:
                    os._exit(0)
            conn, _ = server.accept()
            try:
                self.assertIsNone(zygote._authorized(conn, SECRET))
            finally:
                conn.close()
                server.close()
                os.waitpid(pid, 0)


if __name__ == "__main__":
    unittest.main()
