#include "render.h"
void pa_render_svg(const pa_profile *p, const pa_svg_opts *opts, pa_buf *out) {
    (void)p;
    (void)opts;
    pa_buf_puts(out, "<svg/>");
}
