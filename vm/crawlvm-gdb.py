# crawlvm's frame reader for crawl's gdb extension (gdb/crawl.py): the
# script activations an interpreter segment ('crawlvm-interpreter' Frame)
# runs, read from memory through crawlvm's debug info. It needs no call
# into the process, so `bt`, `crawl bt` and `crawl frames` show script
# frames in a core file too, and where gdb cannot call functions.
#
# An embedder's own Frame types get theirs the same way: a function of
# the Frame's address that returns (description or None, [activation
# lines, newest first]), put in gdb.crawl_frame_readers under the type's
# name. It mirrors the type's C hooks (here vm/interp.c's seg_next and
# seg_describe) and must stay in step with the structures it reads.
#
#   gdb -x gdb/crawl.py -x vm/crawlvm-gdb.py --args build/dev/crawlvm script.crawl

import gdb

# A segment holds at most CALL_DEPTH (vm/vm.c) callinfos: more is a
# corrupt one. The newest _MAX_SHOWN are shown, then one line for the rest
# (a script stopped at its "stack overflow" has a million: gdb took 35 s
# to print them).
_CALL_DEPTH = 1 << 20
_MAX_SHOWN = 10000
_MAX_NAME = 4096


def _string(ptr):
    """A C string, at most _MAX_NAME bytes: '?' if it cannot be read."""
    try:
        if int(ptr) == 0:
            return "?"
        return ptr.string(errors="replace")[:_MAX_NAME]
    except (gdb.error, gdb.MemoryError, UnicodeError):
        return "?"


def _segment_type():
    """crawlvm's segment, from the block vm_segment_type is defined in
    (another module's 'segment' is not it)."""
    sym = gdb.lookup_global_symbol("vm_segment_type") or gdb.lookup_static_symbol(
        "vm_segment_type")
    if sym is not None and sym.symtab is not None:
        try:
            return gdb.lookup_type("segment", sym.symtab.static_block())
        except gdb.error:
            pass
    return gdb.lookup_type("segment")


def _activation(c):
    """'name file:line' of one callinfo, as seg_describe makes it."""
    p = c["cl"]["p"].dereference()
    pc = int(c["pc"])
    ncode = int(p["ncode"])
    line = int(p["lines"][pc - 1]) if 0 < pc <= ncode else int(p["line"])
    return "%s %s:%d" % (_string(p["name"]), _string(p["file"]), line)


def read_segment(addr):
    """(None, activations newest first) of the segment Frame at addr, as
    seg_next and seg_describe make them: 'name file:line', '?' for one
    that cannot be read."""
    seg = gdb.Value(addr).cast(_segment_type().pointer()).dereference()
    vm = seg["vm"].dereference()
    base = int(seg["ci_base"])
    end = int(seg["ci_end"]) or int(vm["nci"])
    if end < base or end - base > _CALL_DEPTH:
        raise gdb.error("a corrupt segment: callinfos %d..%d" % (base, end))
    acts = []
    ci = vm["ci"]
    shown = min(end - base, _MAX_SHOWN)
    for i in range(end - 1, end - 1 - shown, -1):
        try:
            acts.append(_activation(ci[i]))
        except (gdb.error, gdb.MemoryError) as e:
            acts.append("? (callinfo %d: %s)" % (i, e))
    if end - base > shown:
        acts.append("... %d older activation(s)" % (end - base - shown))
    return None, acts


if not hasattr(gdb, "crawl_frame_readers"):
    gdb.crawl_frame_readers = {}
gdb.crawl_frame_readers["crawlvm-interpreter"] = read_segment
