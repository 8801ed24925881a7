/* late.c: a library the symbolizer test loads with dlopen after its first lookup, to show
 * that objects loaded later are found. */
int pa_late_function(int x);

int pa_late_function(int x) {
    return x * 3 + 1;
}
