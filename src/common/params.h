/* params.h — the one table of SOCKSWITCH_* settings: name, type, default,
 * accepted values and help; parsed once at start-up by the library, listed
 * by `sockswitch params`, checked against the README by t_params. */
#ifndef SSW_PARAMS_H
#define SSW_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ssw_param_id {
	SSW_P_LOG,
	SSW_P_LOG_FILE,
	SSW_P_CONF,
	SSW_P_ROUTES,
	SSW_P_DISABLE,
	SSW_P_STATS_FILE,
	SSW_P_STAT,
	SSW_P_STAT_DIR,
	SSW_P_CMA,
	SSW_P_RDMA,
	SSW_P_RNDV_THRESHOLD,
	SSW_P_RNDV_MAX,
	SSW_P_REGCACHE,
	SSW_P_REGCACHE_MAX,
	SSW_P_WAIT,
	SSW_P_SPIN_US,
	SSW_P_SHM_RING,
	SSW_P_LIB,
	SSW_P_GNUPLOT,
	SSW_P_NO_EXEC_KEEP,
	SSW_P_INHERIT,
	SSW_P_SHARED_CONTEXT,
	SSW_P_FAULT,
	SSW_P_COUNT
};

enum ssw_param_type {
	SSW_PT_NUM,    /* decimal number in [lo, hi] */
	SSW_PT_BYTES,  /* decimal number of bytes, optional K/M/G suffix (KiB...), in [lo, hi] */
	SSW_PT_CHOICE, /* one of choices */
	SSW_PT_PATH,   /* a file name (opened later with ssw_file_open) */
	SSW_PT_TEXT,   /* free text, parsed by its user (routing rules, a program) */
};

/* What a rejected value leads to. */
enum ssw_param_bad {
	SSW_PB_DEFAULT, /* one warning, then the documented default */
	SSW_PB_OFF,     /* one warning, then the switch stays off: the program runs on kernel TCP */
};

struct ssw_param {
	const char *name;
	enum ssw_param_type type;
	enum ssw_param_bad bad;
	const char *def;             /* the default, as documented ("warn", "512K", "none") */
	uint64_t dnum;               /* NUM/BYTES: the default value */
	int dchoice;                 /* CHOICE: index of the default (-1: none) */
	uint64_t lo, hi;             /* NUM/BYTES: accepted range */
	bool pow2;                   /* BYTES: a power of two */
	bool nocase;                 /* CHOICE: compared without case */
	bool absolute;               /* PATH: must start with '/' */
	bool cli;                    /* read by the sockswitch command only, not the library */
	const char *const *choices;  /* CHOICE: accepted values, NULL-terminated */
	const char *users;           /* who reads it: "library", "sockswitch run", ... */
	const char *help;            /* one line */
};

struct ssw_param_value {
	bool set;         /* present and non-empty in the environment */
	bool invalid;     /* set but rejected: the default stands (see bad) */
	uint64_t num;     /* NUM/BYTES */
	int choice;       /* CHOICE: index into choices, -1 for none */
	const char *str;  /* PATH/TEXT: the value (NULL when unset) */
};

extern const struct ssw_param ssw_params[SSW_P_COUNT];

/* Parses text as p's value into *out (set, num/choice/str).  0, or -1 with
 * err = "NAME=VALUE: expected ..." (the value quoted safely, shortened). */
int ssw_param_parse(const struct ssw_param *p, const char *text, struct ssw_param_value *out, char *err,
		    size_t errlen);

/* What p accepts, as the messages and `sockswitch params` say it. */
void ssw_param_accepted(const struct ssw_param *p, char *buf, size_t len);

/* (Re)reads every variable of the table from the environment.  Returns the
 * number of rejected values.  Accessors load once on their own if nobody
 * did (a process that has not started the switch yet). */
int ssw_params_load(void);

const struct ssw_param_value *ssw_param(enum ssw_param_id id);
uint64_t ssw_param_num(enum ssw_param_id id);
int ssw_param_choice(enum ssw_param_id id);
/* PATH/TEXT value, NULL when unset or rejected */
const char *ssw_param_str(enum ssw_param_id id);
/* The message of a rejected value, NULL when it was accepted. */
const char *ssw_param_error(enum ssw_param_id id);

/* The one line a rejected value earns: its message plus what happens now
 * ("; using the default (warn)" / "; switch off, using kernel TCP"). */
void ssw_param_problem(enum ssw_param_id id, char *buf, size_t len);

/* First rejected value whose rejection turns the switch off (settings of
 * the command line tool only do not count), or -1. */
int ssw_params_first_refusal(void);

#endif
