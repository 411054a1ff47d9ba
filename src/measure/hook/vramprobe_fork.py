"""The relay of one trial served by vramprobe's pre-imported interpreter
(vramprobe_zygote.py). vramprobe starts it in place of the user's command,
as `python -E -s -S vramprobe_fork.py SOCKET -- ARGV...`: it starts in
milliseconds (no site, no torch), hands the server the sweep's secret (from
VRAMPROBE_ZYGOTE_SECRET, which it takes out of the environment it passes
on), its stdin, stdout, stderr, working folder, environment, process group
and the command's argv,
and exits as the trial's process did: with its exit code, or killed by the
same signal. vramprobe kills this relay's process group on a timeout, and
the trial's process is in it.
"""
import json
import os
import signal
import socket
import sys


def _target(argv):
    """("script", path) or ("module", name) from `python [-u|-B]... target args`."""
    i, unbuffered = 1, False
    while i < len(argv) and argv[i] in ("-u", "-B"):
        unbuffered = unbuffered or argv[i] == "-u"
        i += 1
    if argv[i] == "-m":
        return ("module", argv[i + 1]), argv[i + 1 :], unbuffered
    return ("script", argv[i]), argv[i:], unbuffered


def main():
    path, argv = sys.argv[1], sys.argv[3:]
    target, script_argv, unbuffered = _target(argv)
    secret = os.environ.pop("VRAMPROBE_ZYGOTE_SECRET", "")
    request = {
        "secret": secret,
        "argv": script_argv,
        "target": target,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "pgid": os.getpgid(0),
        "unbuffered": unbuffered,
    }
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        reply = b""
        while not reply.endswith(b"\n"):
            more = conn.recv(4096)
            if not more:
                break
            reply += more
        code = json.loads(reply)["exit"]
    except (OSError, ValueError, KeyError) as e:
        print(f"vramprobe: the pre-imported interpreter did not run the trial: {e}", file=sys.stderr)
        sys.exit(70)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
