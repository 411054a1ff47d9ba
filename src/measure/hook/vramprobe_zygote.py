"""vramprobe's pre-imported interpreter (command mode, a sweep of
`python script.py ...` or `python -m module ...`).

Started once per sweep as `python vramprobe_zygote.py SOCKET SCRIPT_OR_-m MODULE`,
with the sweep's secret as the first line of its stdin, it imports torch and the script's own top-level imports (the slow part of a
trial's start), never initialises CUDA, prints "ready" and then serves one
trial at a time on the Unix socket SOCKET, as multiprocessing's forkserver
does: for each request it forks a child that

- joins the process group of the relay (vramprobe_fork.py) that asked, so
  vramprobe's timeout and Ctrl-C kill it as they kill a fresh process;
- takes the relay's stdin, stdout and stderr (passed over the socket), its
  working folder, environment and argv;
- arms vramprobe's hook and runs the script (or module) as `__main__`.

It serves only requests that come from its own uid (SO_PEERCRED) and carry
the secret (compared in constant time); anything else is closed unanswered
and runs nothing. vramprobe makes SOCKET in a folder only the user can enter.

It then reports the child's exit status to the relay, which exits with it.
Each trial is still a fresh process with a fresh allocator: only the
imported modules are shared, copy-on-write. Anything this cannot serve
stops it with "failed: <why>" instead of "ready", and vramprobe starts every
trial as a fresh process instead.
"""
import ast
import hmac
import json
import os
import socket
import struct
import sys

# A request larger than this is not one of vramprobe's relays.
_MAX_REQUEST = 64 << 20


def _top_level_imports(path):
    """The modules the script imports at its top level, each with the names
    it takes from it (not its own local modules, whose import may do
    anything)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []
    here = os.path.dirname(os.path.abspath(path))
    imports = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            imports.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imports.append((node.module, [a.name for a in node.names if a.name != "*"]))
    local = lambda n: os.path.exists(os.path.join(here, n.split(".")[0])) or os.path.exists(
        os.path.join(here, n.split(".")[0] + ".py")
    )
    return [(m, names) for m, names in imports if not local(m)]


def _preload(target):
    import importlib

    import torch  # noqa: F401  (the point: imported once, before any fork)

    # The CPU allocator counts from here, as in a fresh trial, where the
    # hook turns this on as torch is imported: a tensor the script's imports
    # keep is part of every trial's peak either way.
    import vramprobe_memory

    vramprobe_memory.count_every_thread(torch)

    modules = _top_level_imports(target[1]) if target[0] == "script" else []
    for module, names in modules:
        try:
            imported = importlib.import_module(module)
            for name in names:
                # `from transformers import Trainer`: libraries that load
                # lazily load the name's module on first access.
                getattr(imported, name, None)
        except BaseException:  # the trial will raise it again, in its own process
            pass
    if torch.cuda.is_initialized():
        return "importing the script's modules initialises CUDA, which a forked process cannot use"
    return None


def _run_child(request, fds):
    """In the forked child: become the trial's process and run the script."""
    import atexit
    import runpy
    import traceback

    code = 1
    try:
        os.setpgid(0, request["pgid"])
        try:
            import ctypes

            ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: die with the server
        except (OSError, AttributeError):
            pass
        for i, fd in enumerate(fds[:3]):
            os.dup2(fd, i)
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("unbuffered"):
            for stream in (sys.stdout, sys.stderr):
                stream.reconfigure(write_through=True)
        sys.argv = list(request["argv"])
        kind, what = request["target"]
        sys.path[0] = os.path.dirname(os.path.abspath(what)) if kind == "script" else os.getcwd()
        if os.environ.get("VRAMPROBE_RECORDS_DIR"):
            import vramprobe_hook

            vramprobe_hook.arm()
        try:
            if kind == "script":
                runpy.run_path(what, run_name="__main__")
            else:
                runpy.run_module(what, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            # What the interpreter does with an uncaught exception: the
            # hook's excepthook classifies it (out of memory or an error).
            sys.excepthook(*sys.exc_info())
            code = 1
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code & 0xFF if code >= 0 else 1)


def _peer_uid(conn):
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _receive(conn):
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 8)
    try:
        while not message.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more or len(message) > _MAX_REQUEST:
                raise ValueError("an incomplete request")
            message += more
        return json.loads(message), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _authorized(conn, secret):
    """The request of a relay of this sweep, with its descriptors; None (and
    a line in the interpreter's log) for anyone else."""
    uid = _peer_uid(conn)
    if uid != os.getuid():
        print(f"vramprobe: refused a connection from uid {uid}", file=sys.stderr, flush=True)
        return None
    conn.settimeout(30)
    request, fds = _receive(conn)
    given = request.get("secret") if isinstance(request, dict) else None
    if not isinstance(given, str) or not hmac.compare_digest(given.encode(), secret.encode()):
        for fd in fds:
            os.close(fd)
        print("vramprobe: refused a request without this sweep's secret", file=sys.stderr, flush=True)
        return None
    conn.settimeout(None)
    return request, fds


def main():
    path, target = sys.argv[1], (("module", sys.argv[3]) if sys.argv[2] == "-m" else ("script", sys.argv[2]))
    secret = sys.stdin.readline().strip()
    if not secret:
        print("failed: no secret on stdin", flush=True)
        return
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    try:
        why = _preload(target)
    except BaseException as e:
        why = f"importing torch failed: {type(e).__name__}: {e}"
    print(f"failed: {why}" if why else "ready", flush=True)
    if why:
        return
    while True:
        conn, _ = server.accept()
        try:
            served = _authorized(conn, secret)
        except (OSError, ValueError):
            served = None
        if served is None:
            conn.close()
            continue
        request, fds = served
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            server.close()
            conn.close()
            _run_child(request, fds)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        except OSError:
            pass  # the relay was killed (a timeout): its trial is over anyway
        conn.close()


if __name__ == "__main__":
    main()
