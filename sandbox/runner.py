import sys


def _pybox_supervisor():
    # The in-container runner, in two processes.
    #
    # The supervisor starts as root with four capabilities (SETUID, SETGID,
    # SETPCAP, KILL) and keeps the container's standard streams. It forks
    # the worker, which drops to uid 10001 with no capability at all before
    # any of the user's code runs. The supervisor writes each call's input
    # files (root-owned, so the code cannot write over them), hands the code
    # to the worker, relays the worker's output, and ends each call with a
    # marker that holds a nonce made after the fork: the code cannot read the
    # supervisor's memory (another uid, not dumpable), so it cannot forge the
    # end of its own output.
    #
    # Protocol, server to supervisor (stdin): a first line once the server
    # is attached (its content is ignored), then one JSON line per request,
    # {"code", "files"} to run code, {"op": "interrupt"} to send the running
    # code SIGINT. Supervisor to server: "PYBOX-READY <nonce>\n" on stdout;
    # per call, the code's stdout, then "\0PYBOX-END <nonce>\n", a JSON
    # trailer line and the trailer's "archive" bytes of output files as tar;
    # on stderr, the code's stderr, then the same end marker. Without
    # PYBOX_SESSION the worker runs one call and everything exits.
    import base64
    import ctypes
    import fcntl
    import json
    import os
    import select
    import signal

    uid = int(os.environ.get("PYBOX_UID", "10001"))
    gid = int(os.environ.get("PYBOX_GID", str(uid)))
    session = os.environ.get("PYBOX_SESSION") == "1"
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_DUMPABLE, PR_CAPBSET_DROP = 4, 24
    out_max = int(os.environ.get("PYBOX_OUTPUT_MAX", str(24 << 20)))

    # /mnt/outputs is a fresh tmpfs owned by the worker where the engine
    # takes a tmpfs uid= option (Docker); where it does not (Podman), it is
    # root's, and root may still open it to the worker: sticky, like /tmp.
    try:
        if os.stat("/mnt/outputs").st_uid != uid:
            os.chmod("/mnt/outputs", 0o1777)
    except OSError:
        pass

    # Pipes to the worker: code in; stdout, stderr, outputs and status out.
    code_r, code_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    arc_r, arc_w = os.pipe()
    st_r, st_w = os.pipe()

    pid = os.fork()
    if pid == 0:
        try:
            for fd in (code_w, out_r, err_r, arc_r, st_r):
                os.close(fd)
            devnull = os.open("/dev/null", os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (devnull, out_w, err_w):
                os.close(fd)
            keep = {0, 1, 2, code_r, arc_w, st_w}
            for fd in range(3, 256):
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            preimport = [n for n in os.environ.get("PYBOX_PREIMPORT", "").split(",") if n]
            for name in ("PYBOX_UID", "PYBOX_GID", "PYBOX_OUTPUT_MAX", "PYBOX_PREIMPORT", "PYBOX_SESSION"):
                os.environ.pop(name, None)
            if uid != 0:
                _pybox_drop(libc, uid, gid, PR_CAPBSET_DROP)
            _pybox_install_backend()
            _pybox_preimport(preimport)
            os.write(st_w, b'{"ready": true}\n')
            _pybox_worker(code_r, arc_w, st_w, out_max, session)
        except BaseException as exc:  # never return into the supervisor's code
            try:
                os.write(2, ("pybox: the sandbox's worker failed: %r\n" % (exc,)).encode())
            finally:
                os._exit(1)
        os._exit(0)

    for fd in (code_r, out_w, err_w, arc_w, st_w):
        os.close(fd)
    for fd in (out_r, err_r):
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    nonce = base64.b16encode(os.urandom(16)).decode().lower()

    def write_all(fd, data):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    closed = set()

    def relay(fd):
        # Copy what the worker's pipe holds now to the container's stream.
        target = 1 if fd == out_r else 2
        while fd not in closed:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                closed.add(fd)
                return
            write_all(target, data)

    inbuf = bytearray()

    def next_request(block):
        # Returns the next request line from the server, None at EOF, or
        # "" when block is false and no whole line is there yet.
        while b"\n" not in inbuf:
            if not block:
                r, _, _ = select.select([0], [], [], 0)
                if not r:
                    return ""
            data = os.read(0, 1 << 20)
            if not data:
                return None
            inbuf.extend(data)
        i = inbuf.index(b"\n")
        line = bytes(inbuf[:i])
        del inbuf[:i + 1]
        return line

    # The server's first line says it is attached to the streams (some
    # engines attach only after the start): nothing is written before it.
    if next_request(True) is None:
        os.kill(pid, signal.SIGKILL)
        os._exit(0)

    # The worker says when it is ready (its modules imported): only then is
    # the sandbox ready for code.
    ready = b""
    while b"\n" not in ready:
        data = os.read(st_r, 4096)
        if not data:
            break
        ready += data
    status = bytearray(ready[ready.index(b"\n") + 1:] if b"\n" in ready else b"")
    write_all(1, ("PYBOX-READY %s\n" % nonce).encode())

    def oom_kills():
        # The container's memory cgroup's count of OOM kills (cgroup v1 or
        # v2), or None where it cannot be read (gVisor): the engine's own
        # OOMKilled flag is not reported by every engine (Podman).
        for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
            try:
                with open(path) as f:
                    for line in f:
                        k, _, v = line.partition(" ")
                        if k == "oom_kill":
                            return int(v)
            except (OSError, ValueError):
                pass
        return None

    worker_alive = True
    archive = bytearray()
    exit_code = 0
    while worker_alive:
        line = next_request(True)
        if line is None:
            break
        try:
            req = json.loads(line)
        except Exception as exc:
            write_all(2, ("pybox: bad request to the sandbox runner: %r\n" % (exc,)).encode())
            continue
        if req.get("op") == "interrupt":
            continue  # nothing runs
        for f in req.get("files") or []:
            path = os.path.join("/mnt/user-data", f["path"])
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            fd = os.open(path, flags, 0o644)
            write_all(fd, base64.b64decode(f["data"]))
            os.close(fd)
        pending = json.dumps({"code": req.get("code", "")}).encode() + b"\n"
        kills_before = oom_kills()

        # Relay until the worker reports the call done, or dies.
        done = None
        stdin_open = True
        while done is None:
            rl = [fd for fd in (out_r, err_r, arc_r, st_r) if fd not in closed]
            if stdin_open:
                rl.append(0)
            wl = [code_w] if pending else []
            r, w, _ = select.select(rl, wl, [])
            if w:
                try:
                    n = os.write(code_w, pending[:65536])
                    pending = pending[n:]
                except OSError:
                    pending = b""
            if 0 in r:
                # Only interrupts arrive while code runs.
                got = next_request(False)
                if got is None:
                    stdin_open = False
                while got:
                    try:
                        if json.loads(got).get("op") == "interrupt":
                            os.kill(pid, signal.SIGINT)
                    except Exception:
                        pass
                    got = next_request(False)
                    if got is None:
                        stdin_open = False
            for fd in (out_r, err_r):
                if fd in r:
                    relay(fd)
            if arc_r in r:
                data = os.read(arc_r, 1 << 20)
                if not data:
                    closed.add(arc_r)
                elif len(archive) <= out_max + (1 << 20):
                    archive += data
            if st_r in r:
                data = os.read(st_r, 65536)
                if not data:
                    closed.add(st_r)
                    worker_alive = False
                status += data
                if b"\n" in status:
                    i = status.index(b"\n")
                    try:
                        done = json.loads(bytes(status[:i]))
                    except Exception:
                        done = {"malformed": True}
                    del status[:i + 1]
            if not worker_alive and done is None:
                done = {"worker_exited": True}
        # Everything the worker wrote before its report is in the pipes.
        relay(out_r)
        relay(err_r)
        if done.get("worker_exited"):
            worker_alive = False
        if not worker_alive or not session:
            # The worker's own exit status: a signal (an OOM kill) shows here.
            while arc_r not in closed:
                data = os.read(arc_r, 1 << 20)
                if not data:
                    closed.add(arc_r)
                elif len(archive) <= out_max + (1 << 20):
                    archive += data
            _, wstatus = os.waitpid(pid, 0)
            worker_alive = False
            if os.WIFSIGNALED(wstatus):
                exit_code = 128 + os.WTERMSIG(wstatus)
            else:
                exit_code = os.WEXITSTATUS(wstatus)
            if "exit_code" in done and not os.WIFSIGNALED(wstatus):
                exit_code = done["exit_code"]
        else:
            exit_code = done.get("exit_code", 1)
        n = min(int(done.get("archive", 0) or 0), len(archive))
        if done.get("worker_exited"):
            n = 0
        chunk = bytes(archive[:n])
        del archive[:n]
        trailer = {"exit_code": exit_code, "archive": len(chunk), "worker": done, "session_over": not worker_alive}
        kills = oom_kills()
        if kills is not None and kills_before is not None:
            trailer["oom_kills"] = kills - kills_before
        write_all(1, b"\0PYBOX-END " + nonce.encode() + b"\n" + json.dumps(trailer).encode() + b"\n")
        write_all(1, chunk)
        write_all(2, b"\0PYBOX-END " + nonce.encode() + b"\n")
        if not session:
            break
    if worker_alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(exit_code & 0xFF)


def _pybox_preimport(names):
    # Import the common heavy modules ahead of the code, as the worker (so
    # nothing is owned by another user), with its output thrown away, and
    # leave no file behind: matplotlib's cache directory is removed once
    # its font list is in memory, and made again on demand.
    if not names:
        return
    import os

    saved = [os.dup(1), os.dup(2)]
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        for name in names:
            try:
                __import__(name)
            except Exception:
                pass
        mpl = sys.modules.get("matplotlib")
        if mpl is not None:
            import shutil

            for fn in ("get_configdir", "get_cachedir"):
                try:
                    shutil.rmtree(getattr(mpl, fn)(), ignore_errors=True)
                    getattr(mpl, fn).cache_clear()
                except Exception:
                    pass
            try:
                os.rmdir("/tmp/.config")
            except OSError:
                pass
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)


def _pybox_drop(libc, uid, gid, PR_CAPBSET_DROP):
    # Drop every capability from the bounding set, then become uid and gid:
    # the change of uid from root empties the permitted and effective sets.
    import os

    last = int(open("/proc/sys/kernel/cap_last_cap").read().strip() or "40")
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    if os.getuid() != uid or os.geteuid() != uid or int(status["CapEff"].strip(), 16) != 0:
        raise RuntimeError("could not drop privileges")


def _pybox_worker(code_r, arc_w, st_w, out_max, session):
    # Runs the user's code as __main__ so that tracebacks, sys.argv,
    # sys.path and __main__ look as they would for `python3 main.py` in the
    # working directory; then sends the output files and a status line. In
    # a session it runs call after call in the same __main__. Nothing of
    # this function stays reachable from the user's globals.
    import builtins
    import io
    import json
    import linecache
    import os
    import signal
    import types

    class _FullWriter(io.RawIOBase):
        # Unbuffered like python -u, but a write is never left half done:
        # some runtimes (gVisor) take at most 64 KiB per write to a pipe,
        # and the -u stream drops the rest silently.
        def __init__(self, fd):
            self._fd = fd

        def writable(self):
            return True

        def fileno(self):
            return self._fd

        def write(self, b):
            view = memoryview(b).cast("B")
            done = 0
            while done < len(view):
                done += os.write(self._fd, view[done:])
            return done

    _FullWriter.__module__ = "io"
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        new = io.TextIOWrapper(_FullWriter(fd), encoding=old.encoding, errors=old.errors, write_through=True)
        setattr(sys, name, new)
        setattr(sys, "__%s__" % name, new)
    sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    cwd = os.getcwd()
    main = types.ModuleType("__main__")
    main.__dict__.update({
        "__builtins__": builtins,
        "__file__": os.path.join(cwd, "main.py"),
        "__cached__": None,
    })
    sys.modules["__main__"] = main
    sys.argv[:] = ["main.py"]
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    _pybox_install_backend()

    code_f = os.fdopen(code_r, "rb")
    call = 0
    while True:
        try:
            line = code_f.readline()
        except KeyboardInterrupt:
            continue  # an interrupt that came too late for the last call
        if not line:
            os._exit(0)
        call += 1
        before = _pybox_snapshot() if session else {}
        exit_code = _pybox_run_one(main, json.loads(line)["code"], "main.py" if call == 1 else "main_%d.py" % call)
        if not session:
            try:
                import threading
                threading._shutdown()  # join non-daemon threads, as the interpreter would
            except BaseException:
                pass
        # Before the exit functions: pyplot registers one that closes all
        # figures.
        _pybox_save_figures()
        if not session:
            try:
                import atexit
                atexit._run_exitfuncs()
            except BaseException:
                pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        status = _pybox_send_outputs(arc_w, out_max, before)
        status["exit_code"] = exit_code
        os.write(st_w, json.dumps(status).encode() + b"\n")
        if not session:
            os._exit(exit_code)


def _pybox_run_one(main, source, filename):
    # Runs one call's code in main's namespace and returns its exit code.
    import linecache

    lines = source.splitlines(True)
    # mtime None keeps linecache.checkcache from dropping the entry, so
    # tracebacks show the user's source lines without a file on disk.
    linecache.cache[filename] = (len(source), None, lines, filename)
    try:
        try:
            code = compile(source, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            # As Python reports a syntax error in a script: no traceback
            # header, no frame of ours.
            exc.__traceback__ = None
            sys.excepthook(type(exc), exc, None)
            return 1
        del source, lines
        try:
            exec(code, main.__dict__)
        except SystemExit as exc:
            return _pybox_exit_code(exc)
        except BaseException as exc:
            tb = exc.__traceback__
            # Drop this runner's own frame: the first is always ours.
            if tb is not None and tb.tb_frame.f_code is _pybox_run_one.__code__:
                tb = tb.tb_next
            exc.__traceback__ = tb
            sys.excepthook(type(exc), exc, tb)
            return 130 if isinstance(exc, KeyboardInterrupt) else 1
        return 0
    except KeyboardInterrupt:
        return 130


def _pybox_exit_code(exc):
    # What the interpreter does with SystemExit at the top level.
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


class _PyboxBackendFinder:
    # Imports "pybox_backend", a matplotlib backend like the notebook's
    # inline one: Agg for drawing, and show() saves every open figure to
    # /mnt/outputs and closes it. Found only when matplotlib asks for it.
    def find_spec(self, name, path=None, target=None):
        if name != "pybox_backend":
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends import backend_agg

        module.FigureCanvas = backend_agg.FigureCanvasAgg
        module.FigureManager = FigureManagerBase

        def show(*args, **kwargs):
            _pybox_save_figures()

        module.show = show


def _pybox_install_backend():
    import os

    if any(isinstance(f, _PyboxBackendFinder) for f in sys.meta_path):
        return
    sys.meta_path.append(_PyboxBackendFinder())
    os.environ["MPLBACKEND"] = "module://pybox_backend"


_pybox_figures = [0]


def _pybox_save_figures():
    # Save each open pyplot figure as /mnt/outputs/figure_N.png, then close it.
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for num in plt.get_fignums():
            fig = plt.figure(num)
            _pybox_figures[0] += 1
            fig.savefig("/mnt/outputs/figure_%d.png" % _pybox_figures[0])
            plt.close(fig)
    except Exception as exc:
        try:
            sys.stderr.write("pybox: could not save an open figure: %r\n" % (exc,))
        except Exception:
            pass


def _pybox_snapshot():
    # The size and modification time of each file under /mnt/outputs.
    import os

    seen = {}
    for dirpath, _, filenames in os.walk("/mnt/outputs", followlinks=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
                seen[path] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
    return seen


def _pybox_send_outputs(arc_w, out_max, before):
    # Send the regular files under /mnt/outputs as a tar stream, within the
    # size budget; symlinks and other special files are left out and named.
    import io
    import os
    import stat
    import tarfile

    root = "/mnt/outputs"
    skipped = []
    count = 0
    total = 0
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if before.get(path) == (st.st_size, st.st_mtime_ns):
                    continue  # unchanged since an earlier call of the session
                if not stat.S_ISREG(st.st_mode):
                    skipped.append({"path": rel, "why": "not a regular file"})
                    continue
                count += 1
                if count > 1000 or total + st.st_size > out_max:
                    skipped.append({"path": rel, "why": "over the size or count budget", "size": st.st_size})
                    continue
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as f:
                        data = f.read(out_max - total + 1)
                except OSError as exc:
                    skipped.append({"path": rel, "why": "unreadable: %s" % exc.strerror})
                    continue
                if total + len(data) > out_max:
                    skipped.append({"path": rel, "why": "over the size budget"})
                    continue
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
                total += len(data)
    data = buf.getvalue()
    view = memoryview(data)
    while view:
        view = view[os.write(arc_w, view):]
    return {"skipped": skipped[:100], "skipped_count": len(skipped), "archive": len(data)}


_pybox_supervisor()
