/* Pieces of the JSON Schema converter that stand alone: integer ranges and regex patterns
 * as GBNF expressions. */
#ifndef LLMM_JSON_SCHEMA_PARTS_H
#define LLMM_JSON_SCHEMA_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "gbnf_text.h"

/* Integers are written with at most this many digits, so that every bound fits an int64 and
 * a sampler cannot wander through endless digits. */
#define SCHEMA_MAX_INT_DIGITS 16
#define SCHEMA_MAX_INT_BOUND 999999999999999LL /* 15 digits: a bound's magnitude at most */

/* A GBNF expression for the JSON integers in [min, max]: no leading zeros, no '+', no "-0".
 * A side without a bound (has_min / has_max 0) reaches SCHEMA_MAX_INT_DIGITS digits. The
 * bounds' magnitudes are at most SCHEMA_MAX_INT_BOUND and min <= max when both are given. */
void llmm__gbnf_integer_range(gbnf_text *out, int has_min, int64_t min, int has_max, int64_t max);

/* A GBNF expression for the inside of a JSON string (between the quotes) whose decoded text
 * matches the ECMA-262 regular expression pattern[0..len) (UTF-8) as JSON Schema's "pattern"
 * does: anywhere, unless anchored with ^ and $. Returns 1, or 0 with a message in err naming
 * what lies outside the supported subset and where. */
int llmm__gbnf_from_pattern(gbnf_text *out, const char *pattern, size_t len, char *err, size_t err_size);

#endif
