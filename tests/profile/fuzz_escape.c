/* fuzz_escape.c - libFuzzer target: the HTML and JSON escapers and the frame splitter. Output
 * must never contain markup characters or raw control bytes, whatever the input. */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    pa_buf h = {0}, j = {0};
    pa_buf_html_str(&h, (const char *)data, size);
    pa_buf_json_str(&j, (const char *)data, size);
    for (size_t i = 0; i < h.len; i++) {
        unsigned char c = (unsigned char)h.data[i];
        if (c == '<' || c == '>' || c == '"' || c == '\'' || (c < 0x20 && c != '\t'))
            abort();
    }
    for (size_t i = 0; i < j.len; i++) {
        unsigned char c = (unsigned char)j.data[i];
        if (c == '<' || c == '>' || c == '&' || c < 0x20)
            abort();
    }
    pa_buf_free(&h);
    pa_buf_free(&j);
    pa_frame_info fi;
    pa_frame_parse((const char *)data, size, &fi);
    if (fi.name < (const char *)data || fi.name + fi.name_len > (const char *)data + size)
        abort();
    if (fi.file &&
        (fi.file < (const char *)data || fi.file + fi.file_len > (const char *)data + size))
        abort();
    return 0;
}
