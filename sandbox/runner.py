import sys


def _pybox_run():
    # The in-container runner. It reads one JSON request line from stdin,
    # then runs the user's code as __main__ so that tracebacks, sys.argv,
    # sys.path and __main__ look as they would for `python3 main.py` in the
    # working directory. Nothing of this function stays reachable from the
    # user's globals.
    import builtins
    import io
    import json
    import linecache
    import os
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

    line = sys.stdin.buffer.readline()
    try:
        req = json.loads(line)
        source = req["code"]
    except Exception as exc:  # a malformed request is the server's bug
        sys.stderr.write("pybox: bad request to the sandbox runner: %r\n" % (exc,))
        sys.stderr.flush()
        os._exit(1)

    filename = "main.py"
    cwd = os.getcwd()
    lines = source.splitlines(True)
    # mtime None keeps linecache.checkcache from dropping the entry, so
    # tracebacks show the user's source lines without a file on disk.
    linecache.cache[filename] = (len(source), None, lines, filename)

    main = types.ModuleType("__main__")
    main.__dict__.update({
        "__builtins__": builtins,
        "__file__": os.path.join(cwd, filename),
        "__cached__": None,
    })
    sys.modules["__main__"] = main
    sys.argv[:] = [filename]
    if cwd not in sys.path:
        sys.path.insert(0, cwd)

    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        # As Python reports a syntax error in a script: no traceback header,
        # no frame of ours.
        exc.__traceback__ = None
        sys.excepthook(type(exc), exc, None)
        sys.stderr.flush()
        sys.exit(1)

    del line, req, source, lines
    try:
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        # Drop this runner's own frame: the first is always ours.
        if tb is not None and tb.tb_frame.f_code is _pybox_run.__code__:
            tb = tb.tb_next
        exc.__traceback__ = tb
        sys.excepthook(type(exc), exc, tb)
        sys.stderr.flush()
        sys.exit(130 if isinstance(exc, KeyboardInterrupt) else 1)


_pybox_run()
