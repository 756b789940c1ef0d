/* tools/generate — the `graft generate` command (tools/generate.c). */
#ifndef GRAFT_TOOLS_GENERATE_H
#define GRAFT_TOOLS_GENERATE_H

/* argv[1] is "generate"; returns the exit status (0, 1 runtime failure, 2 usage error). */
int graft_cmd_generate(int argc, char **argv);
extern const char graft_generate_usage[];

#endif
