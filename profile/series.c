/* series.c: the characters of a series name, APP{k=v,k2=v2}, in one place for the uploader that
 * builds names and the collector that parses them and its selectors (collector/name.c). The
 * rules are Pyroscope's: application names [A-Za-z0-9_./-], label names [A-Za-z0-9_.]; a label
 * value may hold anything printable except the separators , { } = and the quote, so that the
 * canonical "k=v,k2=v2" always splits again without escaping. */
#include "profile.h"

bool pa_series_app_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '/' || c == '-';
}

bool pa_series_label_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
}

bool pa_series_value_char(char c) {
    unsigned char u = (unsigned char)c;
    return u >= 0x20 && u != 0x7f && c != ',' && c != '{' && c != '}' && c != '=' && c != '"';
}
