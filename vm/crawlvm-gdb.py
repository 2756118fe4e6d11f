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

# More activations than any segment holds (the callinfo stack is capped
# far below this): a bigger count is a corrupt segment.
_MAX_ACTIVATIONS = 1 << 20
_MAX_NAME = 4096


def _string(ptr):
    """A C string, at most _MAX_NAME bytes: '?' if it cannot be read."""
    if int(ptr) == 0:
        return "?"
    try:
        return ptr.string(length=-1, errors="replace")[:_MAX_NAME]
    except (gdb.error, gdb.MemoryError):
        return "?"


def read_segment(addr):
    """(None, activations newest first) of the segment Frame at addr, as
    seg_next and seg_describe make them: 'name file:line'."""
    seg = gdb.Value(addr).cast(gdb.lookup_type("segment").pointer()).dereference()
    vm = seg["vm"].dereference()
    base = int(seg["ci_base"])
    end = int(seg["ci_end"]) or int(vm["nci"])
    if end < base or end - base > _MAX_ACTIVATIONS:
        raise gdb.error("a corrupt segment: callinfos %d..%d" % (base, end))
    acts = []
    ci = vm["ci"]
    for i in range(end - 1, base - 1, -1):
        c = ci[i]
        p = c["cl"]["p"].dereference()
        pc = int(c["pc"])
        ncode = int(p["ncode"])
        line = int(p["lines"][pc - 1]) if 0 < pc <= ncode else int(p["line"])
        acts.append("%s %s:%d" % (_string(p["name"]), _string(p["file"]), line))
    return None, acts


if not hasattr(gdb, "crawl_frame_readers"):
    gdb.crawl_frame_readers = {}
gdb.crawl_frame_readers["crawlvm-interpreter"] = read_segment
