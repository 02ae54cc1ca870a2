/* main.c - ringcached's command line, systemd readiness, and exit codes. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "daemon.h"
#include "lifecycle.h"
#include "log.h"
#include "metrics_http.h"
#include "preflight.h"
#include "version.h"

#define DEFAULT_CONFIG "/etc/ringcache/ringcache.conf"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ringcached [-c CONFIG]      serve (foreground)\n"
		"       ringcached --check-config CONFIG [--offline]\n"
		"                      check the file, then each bucket with its\n"
		"                      credentials (--offline: the file alone)\n"
		"       ringcached --version\n"
		"Default config: " DEFAULT_CONFIG "\n"
		"Signals: SIGHUP reloads datasets, SIGTERM drains and exits.\n");
}

/* Type=notify: tell systemd we serve, without linking libsystemd. */
static void notify_ready(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n = strlen(path);
	if (n >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, n);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = 0;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	const char msg[] = "READY=1";
	sendto(fd, msg, sizeof(msg) - 1, 0, (struct sockaddr *)&sa,
	       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n));
	close(fd);
}

static void print_preflight(void *ctx, const char *dataset, int err,
			    const char *text)
{
	(void)ctx;
	(void)dataset;
	if (err)
		printf("warning: %s (not a refusal: the daemon starts, and "
		       "reads of this dataset fail so until it is fixed)\n",
		       text);
	else
		printf("%s\n", text);
}

/* offline: the file alone (syntax, values, the credentials file), no
 * request to S3: what a build or CI job checks where S3 is out of reach. */
static int check_config(const char *path, bool offline)
{
	struct rc_config cfg;
	static char err[CONFIG_ERR_MAX];
	if (config_load(path, &cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	printf("%s: ok (%zu datasets)\n", path, cfg.n_datasets);
	if (cfg.endpoint)
		printf("endpoint: %s\n", cfg.endpoint);
	else
		printf("endpoint: https://s3.%s.amazonaws.com (AWS S3 in "
		       "region %s: [s3] endpoint is not set)\n", cfg.region,
		       cfg.region);
	if (offline) {
		config_free(&cfg);
		return 0;
	}
	/* What the file cannot say: are the buckets there, and readable
	 * with these credentials? Warnings: S3 may be away for a moment. */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	char cerr[400];
	struct creds_provider *creds = daemon_creds_for(&cfg, cerr,
							 sizeof(cerr));
	if (!creds) {
		printf("warning: credentials: %s (the daemon would not start "
		       "so)\n", cerr);
	} else {
		preflight_run(&cfg, creds, print_preflight, NULL);
		creds_provider_free(creds);
	}
	config_free(&cfg);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"check-config", required_argument, NULL, 'C'},
		{"offline", no_argument, NULL, 'O'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *config = DEFAULT_CONFIG, *check = NULL;
	bool offline = false;
	int c;
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'C':
			check = optarg;
			break;
		case 'O':
			offline = true;
			break;
		case 'V':
			printf("ringcached %s (commit %s, ABI %d)\n", rc_build_version,
			       rc_build_commit, RC_ABI_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || (offline && !check)) {
		usage(stderr);
		return 2;
	}
	if (check)
		return check_config(check, offline);
	/* Not dumpable: a client of our own uid cannot ptrace us, nor open
	 * our fds (the arenas' read-write memfds) through /proc/PID/fd. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		log_warn("prctl(PR_SET_DUMPABLE): %s", strerror(errno));
	curl_global_init(CURL_GLOBAL_DEFAULT);
	static struct server srv;
	struct daemon *d = &srv.d;
	static char err[CONFIG_ERR_MAX];
	int rc = 0;
	if (daemon_init(&srv, config, err, sizeof(err)) < 0) {
		/* A config's errors come one per line: a log line each. */
		for (char *line = strtok(err, "\n"); line;
		     line = strtok(NULL, "\n"))
			log_error("%s", line);
		rc = 1;
	} else {
		struct metrics_http *http;
		if (metrics_http_start(d, &http, err, sizeof(err)) < 0) {
			log_error("%s", err);
			rc = 1;
		} else {
			notify_ready();
			rc = daemon_run(d) < 0;
			metrics_http_stop(http);
		}
	}
	daemon_destroy(&srv);
	curl_global_cleanup();
	return rc;
}
