# gdb auto-loads this beside libcrawl.so (installed as
# share/gdb/auto-load/<libdir>/libcrawl.so.<version>-gdb.py): it loads
# crawl's extension from share/crawl/gdb of the same prefix.
import os

_here = os.path.dirname(os.path.abspath(__file__))
_share = _here[: _here.rfind("/gdb/auto-load/")] if "/gdb/auto-load/" in _here else None
if _share:
    _ext = os.path.join(_share, "crawl", "gdb", "crawl.py")
    if os.path.exists(_ext):
        gdb.execute("source " + _ext)
