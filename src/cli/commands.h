/* `mmh3 <command>`: one file per command, each a main-like entry point that
 * receives argv starting at the command name and returns the exit status. */
#ifndef MMH3_CLI_COMMANDS_H
#define MMH3_CLI_COMMANDS_H

int mm_cmd_check(int argc, char **argv);
int mm_cmd_generate(int argc, char **argv);
int mm_cmd_serve(int argc, char **argv);
int mm_cmd_worker(int argc, char **argv);
int mm_cmd_tokenize(int argc, char **argv);
int mm_cmd_conformance(int argc, char **argv);
int mm_cmd_token(int argc, char **argv);
int mm_cmd_db(int argc, char **argv);
int mm_cmd_convert(int argc, char **argv);

#endif
