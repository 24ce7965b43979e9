/* replay.c - runs a libFuzzer target over its saved corpus without libFuzzer,
 * so every `make test` (and `make asan`) replays each input found so far.
 * The corpus folder is tests/fuzz/corpus/<target>, from the binary's name
 * (replay_<target>), or the folders and files given as arguments. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long len;

    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    return 0;
}

static int replay_path(const char *path, int *count)
{
    struct stat st;
    DIR *d;
    struct dirent *e;

    if (stat(path, &st) != 0)
        return 0; /* no corpus yet */
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return replay_file(path);
    }
    d = opendir(path);
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char child[4096];

        if (e->d_name[0] == '.')
            continue;
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        if (replay_path(child, count) != 0) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    const char *base = strrchr(argv[0], '/');
    char dir[4096];
    int count = 0;

    base = base ? base + 1 : argv[0];
    if (strncmp(base, "replay_", 7) == 0)
        base += 7;
    /* Empty input first: every target must take it. */
    LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            if (replay_path(argv[i], &count) != 0)
                return 1;
    } else {
        snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", base);
        if (replay_path(dir, &count) != 0)
            return 1;
    }
    printf("replay %s: %d inputs, no crash\n", base, count);
    return 0;
}
