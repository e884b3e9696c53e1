/* json.h — the one JSON string writer of the CLI (stat, routes, bench). */
#ifndef SSW_CLI_JSON_H
#define SSW_CLI_JSON_H

/* Print s as a JSON string on stdout; output stays ASCII (bytes outside
 * printable ASCII become \u00XX escapes). */
void cli_json_str(const char *s);

#endif
