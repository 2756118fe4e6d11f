/* Heap profiles as pprof's profile.proto (protobuf-c, from proto/profile.proto
 * compiled at build time), gzip-compressed with zlib: what `go tool pprof`
 * and every pprof viewer read. Two sample types, inuse_objects and
 * inuse_space; one Location per distinct frame (native frames keep their
 * address), one Function per name and file, script activations as
 * functions of their own ("compare" in examples/qsort.crawl, line 18). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.pb-c.h"
#include "sanitizer/heap_output.h"

typedef Perftools__Profiles__Profile pb_profile;
typedef Perftools__Profiles__ValueType pb_type;
typedef Perftools__Profiles__Sample pb_sample;
typedef Perftools__Profiles__Location pb_location;
typedef Perftools__Profiles__Line pb_line;
typedef Perftools__Profiles__Function pb_function;

/* gzip data into o. 0, -ENOMEM or -EIO. */
static int gzip_out(ho_out *o, const uint8_t *data, size_t len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -ENOMEM;
    unsigned char buf[16384];
    z.next_in = (unsigned char *)data;
    z.avail_in = (uInt)len;
    int st;
    do {
        z.next_out = buf;
        z.avail_out = sizeof buf;
        st = deflate(&z, Z_FINISH);
        if (st == Z_STREAM_ERROR)
            break;
        ho_write(o, (const char *)buf, sizeof buf - z.avail_out);
    } while (st != Z_STREAM_END);
    deflateEnd(&z);
    return st == Z_STREAM_END ? 0 : -EIO;
}

int ho_write_pprof(ho_out *o, const ho_profile *cp)
{
    ho_profile *p = (ho_profile *)cp;   /* interns a few strings more */
    int rc = -ENOMEM;
    size_t nf = p->nframes;             /* frame ids 1..nf-1 */
    pb_location *locs = calloc(nf ? nf : 1, sizeof *locs);
    pb_location **locp = calloc(nf ? nf : 1, sizeof *locp);
    pb_line *lines = calloc(nf ? nf : 1, sizeof *lines);
    pb_line **linep = calloc(nf ? nf : 1, sizeof *linep);
    pb_function *funcs = calloc(nf ? nf : 1, sizeof *funcs);
    pb_function **funcp = calloc(nf ? nf : 1, sizeof *funcp);
    unsigned *fid = calloc(nf ? nf : 1, sizeof *fid);
    pb_sample *samples = calloc(p->ngroups + 1, sizeof *samples);
    pb_sample **samplep = calloc(p->ngroups + 1, sizeof *samplep);
    uint64_t *ids = NULL;
    int64_t *values = calloc(2 * p->ngroups + 1, sizeof *values);
    size_t total_frames = 0;
    for (size_t i = 0; i < p->ngroups; i++)
        total_frames += p->groups[i].nframes;
    ids = calloc(total_frames + 1, sizeof *ids);
    uint8_t *packed = NULL;
    if (!locs || !locp || !lines || !linep || !funcs || !funcp || !fid || !samples || !samplep ||
        !values || !ids)
        goto out;

    /* functions: one per (name, file); found by a scan of the ones made for
     * the same name (frames sharing a name are few) */
    size_t nfunc = 0;
    for (size_t i = 1; i < nf; i++) {
        const ho_frame *f = &p->frames[i];
        size_t k = 0;
        for (; k < nfunc; k++)
            if (funcs[k].name == (int64_t)f->name && funcs[k].filename == (int64_t)f->file)
                break;
        if (k == nfunc) {
            perftools__profiles__function__init(&funcs[k]);
            funcs[k].id = k + 1;
            funcs[k].name = funcs[k].system_name = f->name;
            funcs[k].filename = f->file;
            funcp[k] = &funcs[k];
            nfunc++;
        }
        fid[i] = (unsigned)k + 1;
    }
    for (size_t i = 1; i < nf; i++) {
        const ho_frame *f = &p->frames[i];
        perftools__profiles__line__init(&lines[i]);
        lines[i].function_id = fid[i];
        lines[i].line = f->line;
        linep[i] = &lines[i];
        perftools__profiles__location__init(&locs[i]);
        locs[i].id = i;
        locs[i].address = f->kind == HO_NATIVE ? f->pc : 0;
        locs[i].n_line = 1;
        locs[i].line = &linep[i];
        locp[i - 1] = &locs[i];
    }
    size_t at = 0;
    for (size_t i = 0; i < p->ngroups; i++) {
        const ho_group *g = &p->groups[i];
        perftools__profiles__sample__init(&samples[i]);
        samples[i].location_id = &ids[at];
        for (unsigned k = 0; k < g->nframes; k++)
            ids[at++] = g->frames[k];    /* the leaf (newest) first, as pprof wants */
        samples[i].n_location_id = g->nframes;
        if (p->snap->kind == HP_KIND_CPU) {   /* samples, and the CPU time they stand for */
            values[2 * i] = (int64_t)(g->bytes + 0.5);
            values[2 * i + 1] = values[2 * i] * (int64_t)p->snap->period_ns;
        } else {
            values[2 * i] = (int64_t)(g->objects + 0.5);
            values[2 * i + 1] = (int64_t)(g->bytes + 0.5);
        }
        samples[i].value = &values[2 * i];
        samples[i].n_value = 2;
        samplep[i] = &samples[i];
    }
    pb_type types[2], *typep[2] = {&types[0], &types[1]};
    perftools__profiles__value_type__init(&types[0]);
    perftools__profiles__value_type__init(&types[1]);
    int cpu = p->snap->kind == HP_KIND_CPU;
    types[0].type = ho_intern(p, cpu ? "samples" : "inuse_objects");
    types[0].unit = ho_intern(p, "count");
    types[1].type = ho_intern(p, cpu ? "cpu" : "inuse_space");
    types[1].unit = ho_intern(p, cpu ? "nanoseconds" : "bytes");

    pb_profile prof;
    perftools__profiles__profile__init(&prof);
    prof.n_sample_type = 2;
    prof.sample_type = typep;
    prof.n_sample = p->ngroups;
    prof.sample = samplep;
    prof.n_location = nf ? nf - 1 : 0;
    prof.location = locp;
    prof.n_function = nfunc;
    prof.function = funcp;
    pb_type period;
    if (cpu) {
        perftools__profiles__value_type__init(&period);
        period.type = ho_intern(p, "cpu");
        period.unit = ho_intern(p, "nanoseconds");
        prof.period_type = &period;
        prof.period = (int64_t)p->snap->period_ns;
    } else if (p->snap->sample_bytes) {  /* byte samples: say so (values are already scaled) */
        perftools__profiles__value_type__init(&period);
        period.type = ho_intern(p, "space");
        period.unit = ho_intern(p, "bytes");
        prof.period_type = &period;
        prof.period = (int64_t)p->snap->sample_bytes;
    }
    prof.n_string_table = p->nstr;      /* entry 0 is "" (ho_intern made sure) */
    prof.string_table = p->strs;
    size_t len = perftools__profiles__profile__get_packed_size(&prof);
    packed = malloc(len ? len : 1);
    if (!packed)
        goto out;
    perftools__profiles__profile__pack(&prof, packed);
    rc = gzip_out(o, packed, len);
out:
    free(packed);
    free(locs), free(locp), free(lines), free(linep), free(funcs), free(funcp), free(fid);
    free(samples), free(samplep), free(values), free(ids);
    return rc;
}
