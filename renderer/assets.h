/* assets.h - the files of renderer/assets, embedded by embed.c at build time. */
#ifndef PA_ASSETS_H
#define PA_ASSETS_H
#include <stddef.h>

#define PA_ASSET(name)                                                                             \
    extern const unsigned char pa_asset_##name[];                                                  \
    extern const size_t pa_asset_##name##_len;
PA_ASSET(flame_html)
PA_ASSET(flame_css)
PA_ASSET(flame_js)
PA_ASSET(heatmap_css)
PA_ASSET(heatmap_js)
PA_ASSET(svg_js)
#undef PA_ASSET

#endif
