/* The version of the library that is loaded, beside the header's macros. */
#include <crawl/common.h>

#define STR2(x) #x
#define STR(x) STR2(x)

unsigned crawl_version(void)
{
    return CRAWL_VERSION_HEX;
}

const char *crawl_version_string(void)
{
    return STR(CRAWL_VERSION_MAJOR) "." STR(CRAWL_VERSION_MINOR) "." STR(CRAWL_VERSION_PATCH);
}
