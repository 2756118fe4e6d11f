# crawl's gdb extension: the thread's Frames (and the script activations
# interpreter segments host) in gdb's backtraces, at their true places by
# stack address, as crawl's own walk merges them.
#
#   crawl frames   the raw Frame chain of the selected thread
#   crawl bt       native frames and Frames merged by stack address
#   crawl roots    crawl-boehm's root census (a live process)
#   bt             the frame filter adds the Frames and activations a
#                  native frame holds just above it (elided lines of the
#                  newer frame), in the order crawl's own walks report them
#
# It reads the Frame chain from memory (crawl__tls, libcrawl's thread
# record), so a core file shows the chain's order and type names. A Frame's
# text and the activations of an interpreter segment come from:
#   1. a frame reader registered for the Frame's type name, which reads
#      them from memory (a live process or a core file, no code run in the
#      inferior): gdb.crawl_frame_readers[type name] = fn, where fn(address)
#      returns (description or None, [activations, newest first]) and
#      raises (gdb.error, gdb.MemoryError) when it cannot read them: then
#      one line says so, and in a live process the call below is tried.
#      vm/crawlvm-gdb.py is crawlvm's; load it after or before this file;
#   2. else, in a live process, the Frame type's describe hooks, through a
#      call of crawl_debug_frame_text() in the inferior. Where gdb cannot
#      call functions (gdb 13 on a CPU with AMX state fails every call with
#      "Couldn't write extended state status"), one line says so and the
#      Frames show their type names only.
# Source it (gdb -x) or let gdb auto-load it beside libcrawl.so.

import gdb

try:
    from gdb.FrameDecorator import FrameDecorator
except ImportError:  # a gdb without Python frame decorators
    FrameDecorator = None

MAX_FRAMES = 100000
# Activations shown for one Frame through calls (a reader caps its own)
MAX_ACTIVATIONS = 10000

# Frame readers by type name, shared with the scripts that register them
# (whichever of them gdb loads first makes the table).
if not hasattr(gdb, "crawl_frame_readers"):
    gdb.crawl_frame_readers = {}

# Why gdb could not call crawl_debug_frame_text, once said (None: not yet).
_call_failed = None


def _thread_record():
    try:
        return gdb.parse_and_eval("crawl__tls")
    except gdb.error:
        return None


def _is_live():
    inf = gdb.selected_inferior()
    if inf is None or inf.pid == 0:
        return False
    try:
        return gdb.selected_thread().is_valid() and not _is_core()
    except gdb.error:
        return False


def _is_core():
    try:
        out = gdb.execute("info target", to_string=True)
    except gdb.error:
        return False
    return "core dump" in out or "Local core dump file" in out


def _call_failure(err):
    """Say once why the inferior calls failed; later Frames go without."""
    global _call_failed
    if _call_failed is None:
        _call_failed = str(err)
        gdb.write("crawl: gdb could not call crawl_debug_frame_text() in this process (%s): "
                  "Frames without a frame reader show their type names only\n" % _call_failed,
                  gdb.STDERR)


def _reset_call_failure(event=None):
    """A new process may let gdb call again."""
    global _call_failed
    _call_failed = None


if hasattr(gdb, "events") and hasattr(gdb.events, "exited"):
    gdb.events.exited.connect(_reset_call_failure)

# gdb errors that concern one call (a Frame's hook faulted, a breakpoint in
# it, a bad pointer), not gdb's ability to call at all
_ONE_CALL = ("while in a function called from GDB", "Cannot access memory", "No symbol")


def _call(expr):
    """expr, a call, evaluated with unwindonsignal on: a signal in the called
    code (a Frame's describe hook that faults) unwinds the call and leaves
    the process where it stopped, instead of stopped inside the call."""
    try:
        old = gdb.parameter("unwindonsignal")
    except (gdb.error, RuntimeError):
        old = None
    if old is not None:
        gdb.execute("set unwindonsignal on", to_string=True)
    try:
        return gdb.parse_and_eval(expr)
    finally:
        if old is not None:
            gdb.execute("set unwindonsignal %s" % ("on" if old else "off"), to_string=True)


def _text(frame_addr, index):
    """crawl_debug_frame_text(frame, index) in the live inferior, or None."""
    if _call_failed is not None:
        return None
    try:
        v = _call("(const char *)crawl_debug_frame_text((const crawl_frame *)%d, %d)"
                  % (frame_addr, index))
        if int(v) == 0:
            return None
        return v.string(errors="replace")
    except gdb.MemoryError:
        return None
    except gdb.error as e:
        if not any(m in str(e) for m in _ONE_CALL):
            _call_failure(e)
        return None


def crawl_frames():
    """The selected thread's Frames, newest first: (address, type name)."""
    rec = _thread_record()
    if rec is None:
        return None
    if not int(rec["attached"]):
        return []
    lo, hi = int(rec["stack_lo"]), int(rec["stack_hi"])
    out = []
    f = rec["top"]
    seen = set()
    while int(f) != 0 and len(out) < MAX_FRAMES:
        addr = int(f)
        if addr in seen:
            break  # a corrupt chain: stop, as crawl's walk does
        seen.add(addr)
        try:
            t = f["type"]
            name = t["name"].string(errors="replace") if int(t) and int(t["name"]) else "?"
            nxt = f["next"]
        except gdb.MemoryError:
            out.append((addr, "<unreadable>"))
            break
        out.append((addr, name))
        if not (lo <= addr < hi) and lo != hi:
            pass  # on a signal stack: still in the chain
        f = nxt
    return out


def _read(addr, name):
    """The registered reader's (description, activations, failed): None
    without one; when it failed, (None, [a line that says why], True)."""
    reader = gdb.crawl_frame_readers.get(name)
    if reader is None:
        return None
    try:
        text, acts = reader(addr)
        acts = [str(a) for a in acts]
        return (str(text) if text is not None else None), acts, False
    except Exception as e:              # (an embedder's reader: whatever it raised)
        return None, ["<the '%s' frame reader failed: %s>" % (name, e)], True


def _called(addr):
    """(description, activations) through crawl_debug_frame_text calls."""
    text, acts = _text(addr, 0), []
    i = 1
    while i < MAX_ACTIVATIONS:
        act = _text(addr, i)
        if act is None:
            break
        acts.append(act)
        i += 1
    return text, acts


def frame_lines(addr, name, live):
    """The lines for one Frame: its description, then its activations,
    from its type's reader, else (or where the reader failed) through
    calls in a live process."""
    if name == "<unreadable>":
        live = False                     # (no type to call hooks of: nothing is called)
    read = _read(addr, name)
    if read is not None and read[2] and live:
        called = _called(addr)
        if called[0] is not None or called[1]:
            read = called + (False,)     # (the call told what the reader could not)
    if read is not None:
        text, acts, _ = read
    elif live:
        text, acts = _called(addr)
    else:
        text, acts = None, []
    if text == name:
        text = None                      # no describe hook: the type name again
    return ["Frame '%s' at 0x%x%s" % (name, addr, (": " + text) if text else "")] + acts


class CrawlPrefix(gdb.Command):
    """crawl's commands: crawl frames, crawl bt, crawl roots."""

    def __init__(self):
        super().__init__("crawl", gdb.COMMAND_STACK, prefix=True)


class CrawlFrames(gdb.Command):
    """The selected thread's raw Frame chain, newest first."""

    def __init__(self):
        super().__init__("crawl frames", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        frames = crawl_frames()
        if frames is None:
            print("crawl: no crawl__tls here (libcrawl not loaded, or without debug info)")
            return
        live = _is_live()
        print("%d Frame(s)%s" % (len(frames), "" if live else " (from memory)"))
        for i, (addr, name) in enumerate(frames):
            lines = frame_lines(addr, name, live)
            print("#%d %s" % (i, lines[0]))
            for act in lines[1:]:
                print("     in %s" % act)


def _native_frames():
    out = []
    try:
        f = gdb.newest_frame()
    except gdb.error:                    # (no process, no core: no registers)
        return out
    while f is not None and len(out) < MAX_FRAMES:
        try:
            sp = int(f.read_register("rsp"))
        except gdb.error:
            sp = 0
        out.append((f, sp))
        f = f.older()
    return out


def _merged():
    """(kind, payload) in crawl's order: a Frame comes just before the native
    frame whose stack frame holds it (its address between that frame's sp and
    its caller's), as in crawl's walks and crawlvm's --native tracebacks."""
    natives = _native_frames()
    pending = sorted(crawl_frames() or [], key=lambda x: x[0])
    out = []
    for i, (f, sp) in enumerate(natives):
        caller_sp = natives[i + 1][1] if i + 1 < len(natives) else None
        while pending and (caller_sp is None or pending[0][0] < caller_sp):
            out.append(("frame", pending.pop(0)))
        out.append(("native", f))
    for p in pending:
        out.append(("frame", p))
    return out


class CrawlBt(gdb.Command):
    """Native frames and crawl's Frames (with script activations) merged by
    stack address, newest first."""

    def __init__(self):
        super().__init__("crawl bt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        live = _is_live()
        n = 0
        merged = _merged()
        if not merged:
            print("crawl bt: no stack here (no process, or no core file)")
            return
        for kind, x in merged:
            if kind == "native":
                sal = x.find_sal()
                where = ""
                if sal.symtab is not None:
                    where = " at %s:%d" % (sal.symtab.filename, sal.line)
                print("#%-3d 0x%016x in %s%s" % (n, x.pc(), x.name() or "??", where))
                n += 1
            else:
                for line in frame_lines(x[0], x[1], live):
                    print("#%-3d %s" % (n, line))
                    n += 1


class CrawlRoots(gdb.Command):
    """crawl-boehm's census of every root (calls crawl_gc_census in the
    inferior: a live process)."""

    def __init__(self):
        super().__init__("crawl roots", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        if not _is_live():
            print("crawl roots: needs a live process (it calls crawl_gc_census)")
            return
        try:
            gdb.parse_and_eval("crawl_gc_census")
        except gdb.error:
            print("crawl roots: no crawl_gc_census here (is crawl-boehm loaded?)")
            return
        try:
            _call("(void)crawl_gc_census(1)")
        except gdb.error as e:
            print("crawl roots: gdb could not call crawl_gc_census() in this process: %s" % e)


if FrameDecorator is not None:

    class _FrameLine(FrameDecorator):
        """An elided line under a native frame: a Frame or an activation."""

        def __init__(self, base, text):
            super().__init__(base)
            self._text = text

        def function(self):
            return self._text

        def address(self):
            return None

        def filename(self):
            return None

        def line(self):
            return None

        def frame_args(self):
            return None

        def frame_locals(self):
            return None

        def elided(self):
            return None

    class _WithFrames(FrameDecorator):
        def __init__(self, base, lines):
            super().__init__(base)
            self._lines = lines

        def elided(self):
            return iter([_FrameLine(self.inferior_frame(), l) for l in self._lines])

    class CrawlFrameFilter:
        """Adds, under each native frame, the Frames its stack frame holds."""

        def __init__(self):
            self.name = "crawl"
            self.priority = 100
            self.enabled = True
            gdb.frame_filters[self.name] = self

        def filter(self, frame_iter):
            frames = crawl_frames()
            if not frames:
                return frame_iter
            return self._decorate(frame_iter, sorted(frames, key=lambda x: x[0]))

        def _decorate(self, frame_iter, pending):
            # Frames go between the native frame before the one that holds
            # them and that one: as elided lines of the newer frame. Native
            # frames are taken as gdb asks for them, two ahead (bt 3 of a
            # deep stack unwound all of it first: 9 s for 100,000 frames).
            live = _is_live()
            it = iter(frame_iter)

            def take():
                d = next(it, None)
                if d is None:
                    return None
                try:
                    return d, int(d.inferior_frame().read_register("rsp"))
                except gdb.error:
                    return d, 0

            def grab(caller):          # the Frames below the caller's sp (all: no caller)
                lines = []
                while pending and (caller is None or pending[0][0] < caller[1]):
                    addr, name = pending.pop(0)
                    lines.extend(frame_lines(addr, name, live))
                return lines

            cur = take()
            if cur is None:
                return
            nxt = take()
            mine = grab(nxt)             # in the newest frame: under it too
            while cur is not None:
                after = take() if nxt is not None else None
                if nxt is not None:
                    mine = mine + grab(after)
                yield _WithFrames(cur[0], mine) if mine else cur[0]
                mine = []
                cur, nxt = nxt, after

    CrawlFrameFilter()

CrawlPrefix()
CrawlFrames()
CrawlBt()
CrawlRoots()
