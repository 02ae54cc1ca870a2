/* test_config.c - config_load on real files: every key parsed, defaults,
 * sizes, one test per kind of error (line number, section, key, message),
 * user/group lists, the dataset access rule, and the shipped configs. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

static char conf_path[64];
static char err[4096];

/* Writes text to a fresh temp file; the path lives in conf_path. */
static const char *write_conf(const char *text)
{
	snprintf(conf_path, sizeof(conf_path), "/tmp/rc-test-config-XXXXXX");
	int fd = mkstemp(conf_path);
	cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
	size_t len = strlen(text);
	cr_assert_eq(write(fd, text, len), (ssize_t)len);
	cr_assert_eq(close(fd), 0);
	return conf_path;
}

static void remove_conf(void)
{
	if (conf_path[0])
		unlink(conf_path);
}

static int load(const char *text, struct rc_config *cfg)
{
	err[0] = '\0';
	int rc = config_load(write_conf(text), cfg, err, sizeof(err));
	remove_conf();
	return rc;
}

/* Loads text that must fail and checks the message holds "PATH:want". */
static void expect_error(const char *text, const char *want)
{
	struct rc_config cfg;
	err[0] = '\0';
	int rc = config_load(write_conf(text), &cfg, err, sizeof(err));
	char prefix[128];
	snprintf(prefix, sizeof(prefix), "%s", conf_path);
	remove_conf();
	cr_assert_eq(rc, -1, "loaded but should fail with '%s'", want);
	cr_assert(strncmp(err, prefix, strlen(prefix)) == 0 &&
		  err[strlen(prefix)] == ':',
		  "message does not start with 'PATH:': %s", err);
	cr_assert(strstr(err + strlen(prefix), want),
		  "expected '%s' in: %s", want, err);
	cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err);
	cr_assert_null(cfg.path, "config not freed on error");
	cr_assert_null(cfg.datasets);
}

#define DATASET "[dataset d]\nuri = s3://bucket-a/x\n"

Test(config, full_valid_file)
{
	const char *text =
		"; comment\n"
		"# another comment\n"
		"[daemon]\n"
		"socket = /tmp/rc/test.sock\n"
		"socket_mode = 0600\n"
		"memory = 2G\n"
		"block_size = 4M\n"
		"log_level = debug\n"
		"mlock = yes\n"
		"hugepages = off\n"
		"metadata_ttl = 0\n"
		"max_sessions = 17\n"
		"\n"
		"[s3]\n"
		"endpoint = https://s3.example.com:8443/\n"
		"region = eu-west-3\n"
		"addressing = virtual\n"
		"tls_verify = 1\n"
		"ca_file = /dev/null\n"
		"max_connections = 1024\n"
		"max_retries = 0\n"
		"connect_timeout_ms = 1500\n"
		"request_timeout_ms = 45000\n"
		"credentials = config\n"
		"access_key = AKIDEXAMPLE\n"
		"secret_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"
		"session_token = tok/en+=\n"
		"profile = training\n"
		"credentials_file = /etc/passwd\n"
		"\n"
		"[dataset imagenet-1k_v2.0]\n"
		"uri = s3://my.training-data/imagenet/train\n"
		"allow_uids = 0, 1001\n"
		"allow_gids = 27\n"
		"[dataset all]\n"
		"uri = s3://public-bucket\n"
		"allow_uids = *\n";
	struct rc_config c;
	cr_assert_eq(load(text, &c), 0, "%s", err);
	cr_assert_str_eq(c.socket_path, "/tmp/rc/test.sock");
	cr_assert_eq(c.socket_mode, 0600);
	cr_assert_eq(c.memory_bytes, 2ull << 30);
	cr_assert_eq(c.block_bytes, 4u << 20);
	cr_assert_eq(c.log_level, 3);
	cr_assert(c.mlock);
	cr_assert_not(c.hugepages);
	cr_assert_eq(c.metadata_ttl_s, 0);
	cr_assert_eq(c.max_sessions, 17);
	cr_assert_str_eq(c.endpoint, "https://s3.example.com:8443");
	cr_assert_str_eq(c.region, "eu-west-3");
	cr_assert_eq(c.addressing, S3_VIRTUAL_HOSTED);
	cr_assert(c.tls_verify);
	cr_assert_str_eq(c.ca_file, "/dev/null");
	cr_assert_eq(c.max_connections, 1024);
	cr_assert_eq(c.max_retries, 0);
	cr_assert_eq(c.connect_timeout_ms, 1500);
	cr_assert_eq(c.request_timeout_ms, 45000);
	cr_assert_eq(c.creds_source, CREDS_CONFIG);
	cr_assert_str_eq(c.access_key, "AKIDEXAMPLE");
	cr_assert_str_eq(c.secret_key,
			 "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
	cr_assert_str_eq(c.session_token, "tok/en+=");
	cr_assert_str_eq(c.profile, "training");
	cr_assert_str_eq(c.credentials_file, "/etc/passwd");

	cr_assert_eq(c.n_datasets, 2);
	struct rc_dataset_config *d = &c.datasets[0];
	cr_assert_str_eq(d->name, "imagenet-1k_v2.0");
	cr_assert_str_eq(d->uri, "s3://my.training-data/imagenet/train");
	cr_assert_str_eq(d->bucket, "my.training-data");
	cr_assert_str_eq(d->prefix, "imagenet/train/");
	cr_assert_not(d->allow_all);
	cr_assert_eq(d->n_uids, 2);
	cr_assert_eq(d->uids[0], 0);
	cr_assert_eq(d->uids[1], 1001);
	cr_assert_eq(d->n_gids, 1);
	cr_assert_eq(d->gids[0], 27);
	cr_assert_eq(d->line, 31);
	d = &c.datasets[1];
	cr_assert_str_eq(d->name, "all");
	cr_assert_str_eq(d->bucket, "public-bucket");
	cr_assert_str_eq(d->prefix, "");
	cr_assert(d->allow_all);
	cr_assert_eq(d->line, 35);
	config_free(&c);
	cr_assert_null(c.path);
	cr_assert_eq(c.n_datasets, 0);
	config_free(&c); /* twice is harmless */
}

Test(config, defaults_when_keys_are_omitted)
{
	struct rc_config c;
	cr_assert_eq(load(DATASET, &c), 0, "%s", err);
	cr_assert_str_eq(c.socket_path, "/run/ringcache/ringcache.sock");
	cr_assert_eq(c.socket_mode, 0660);
	cr_assert_eq(c.memory_bytes, 1ull << 30);
	cr_assert_eq(c.block_bytes, 1u << 20);
	cr_assert_eq(c.log_level, 2);
	cr_assert_not(c.mlock);
	cr_assert(c.hugepages);
	cr_assert_eq(c.metadata_ttl_s, 60);
	cr_assert_eq(c.metadata_bytes, 0, "0: memory/16");
	cr_assert_eq(c.max_sessions, 256);
	cr_assert_null(c.endpoint);
	cr_assert_str_eq(c.region, "us-east-1");
	cr_assert_eq(c.addressing, S3_VIRTUAL_HOSTED, "AWS: virtual-hosted");
	cr_assert(c.tls_verify);
	cr_assert_null(c.ca_file);
	cr_assert_eq(c.max_connections, 64);
	cr_assert_eq(c.max_retries, RC_MAX_RETRIES_UNSET,
		     "unset: retry_budget alone bounds retries");
	cr_assert_eq(c.retry_budget_s, 60);
	cr_assert_eq(c.connect_timeout_ms, 3000);
	cr_assert_eq(c.request_timeout_ms, 30000);
	cr_assert_eq(c.creds_source, CREDS_AUTO);
	cr_assert_null(c.access_key);
	cr_assert_null(c.secret_key);
	cr_assert_null(c.session_token);
	cr_assert_null(c.profile);
	cr_assert_null(c.credentials_file);
	cr_assert_eq(c.n_datasets, 1);
	cr_assert_str_eq(c.datasets[0].prefix, "x/");
	config_free(&c);
}

Test(config, custom_endpoint_defaults_to_path_style)
{
	struct rc_config c;
	cr_assert_eq(load("[s3]\nendpoint = http://127.0.0.1:9080\n" DATASET,
			  &c), 0, "%s", err);
	cr_assert_str_eq(c.endpoint, "http://127.0.0.1:9080");
	cr_assert_eq(c.addressing, S3_PATH_STYLE);
	config_free(&c);
}

/* retry_budget bounds retries in seconds; an older config's max_retries
 * still loads and is kept as a second bound. */
Test(config, retry_budget_and_max_retries)
{
	struct rc_config c;
	cr_assert_eq(load("[s3]\nretry_budget = 7\nmax_retries = 20\n" DATASET,
			  &c), 0, "%s", err);
	cr_assert_eq(c.retry_budget_s, 7);
	cr_assert_eq(c.max_retries, 20);
	config_free(&c);
}

Test(config, parse_size)
{
	uint64_t v;
	cr_assert_eq(config_parse_size("512M", &v), 0);
	cr_assert_eq(v, 512ull << 20);
	cr_assert_eq(config_parse_size("1G", &v), 0);
	cr_assert_eq(v, 1ull << 30);
	cr_assert_eq(config_parse_size("4096", &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(config_parse_size("64k", &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(config_parse_size("2T", &v), 0);
	cr_assert_eq(v, 2ull << 40);
	cr_assert_eq(config_parse_size("16777215T", &v), 0);
	cr_assert_eq(v, 16777215ull << 40);
	cr_assert_eq(config_parse_size("18446744073709551615", &v), 0);
	cr_assert_eq(v, UINT64_MAX);

	v = 7;
	const char *bad[] = {"12Q", "", "M", "-1", "+5", " 5", "1.5G", "1GB",
			     "0x10", "18446744073709551616", "16777216T",
			     "17179869184G", "99999999999999999999999K"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(config_parse_size(bad[i], &v), -1, "'%s'",
			     bad[i]);
	cr_assert_eq(v, 7, "output untouched on error");
	cr_assert_eq(config_parse_size(NULL, &v), -1);
}

Test(config, memory_sizes_in_file)
{
	struct rc_config c;
	cr_assert_eq(load("[daemon]\nmemory = 512M\n" DATASET, &c), 0, "%s",
		     err);
	cr_assert_eq(c.memory_bytes, 512ull << 20);
	config_free(&c);
	expect_error("[daemon]\nmemory = 12Q\n" DATASET,
		     ":2: [daemon] memory: must be a size like");
	expect_error("[daemon]\nmemory = 12Q\n" DATASET, "(got '12Q')");
	expect_error("[daemon]\n\nmemory = 99999999999999999999T\n" DATASET,
		     ":3: [daemon] memory:");
	expect_error("[daemon]\nmemory = 64K\nblock_size = 1M\n" DATASET,
		     ":2: [daemon] memory: memory (65536 bytes) must hold at least one block");
}

Test(config, unknown_key_names_line_and_key)
{
	expect_error("[daemon]\nsocket = /tmp/a.sock\n\n; typo below\n"
		     "sockett = /tmp/b.sock\n" DATASET,
		     ":5: [daemon] sockett: unknown key (did you mean 'socket'?)");
	expect_error(DATASET "allow_uid = 5\n",
		     ":3: [dataset d] allow_uid: unknown key (did you mean "
		     "'allow_uids'?)");
}

/* The nearest key by edit distance, never a truncated list. */
Test(config, unknown_key_suggests_the_nearest_one)
{
	expect_error("[s3]\nendpiont = http://127.0.0.1:1\n" DATASET,
		     ":2: [s3] endpiont: unknown key (did you mean 'endpoint'?)");
	expect_error("[daemon]\nMEMORY = 1G\n" DATASET,
		     ":2: [daemon] MEMORY: unknown key (did you mean 'memory'?)");
	expect_error("[daemon]\nmax_leased_per_user = 1G\n" DATASET,
		     "unknown key (did you mean 'max_leased_per_uid'?)");
	expect_error(DATASET "writeable = true\n",
		     ":3: [dataset d] writeable: unknown key (did you mean "
		     "'writable'?)");
	/* A key of another section says where it belongs. */
	expect_error("[daemon]\nregion = us-east-1\n" DATASET,
		     ":2: [daemon] region: unknown key in this section (it "
		     "belongs in [s3])");
	expect_error("[s3]\nallow_uids = *\n" DATASET,
		     "[s3] allow_uids: unknown key in this section (it belongs "
		     "in [dataset NAME])");
	/* Nothing near: the whole list, to its last key. */
	expect_error("[daemon]\nzzzzzzzzzzzz = 1\n" DATASET,
		     "unknown key (valid keys: socket, socket_mode, memory,");
	expect_error("[daemon]\nzzzzzzzzzzzz = 1\n" DATASET,
		     ", metrics_listen)");
	expect_error("[s3]\nzzzzzzzzzzzz = 1\n" DATASET,
		     ", credentials_file)");
}

Test(config, bad_bool)
{
	expect_error("[daemon]\nmlock = maybe\n" DATASET,
		     ":2: [daemon] mlock: must be true or false (also yes/no, on/off, 1/0) (got 'maybe')");
	expect_error("[s3]\nregion = us-east-1\ntls_verify = 2\n" DATASET,
		     ":3: [s3] tls_verify: must be true or false");
}

Test(config, bad_block_size)
{
	expect_error("[daemon]\nblock_size = 3M\n" DATASET,
		     ":2: [daemon] block_size: must be a power of two from 64K to 64M (got '3M')");
	expect_error("[daemon]\nblock_size = 32K\n" DATASET,
		     ":2: [daemon] block_size:");
	expect_error("[daemon]\nblock_size = 128M\n" DATASET,
		     ":2: [daemon] block_size:");
	struct rc_config c;
	cr_assert_eq(load("[daemon]\nblock_size = 64M\n" DATASET, &c), 0);
	cr_assert_eq(c.block_bytes, 64u << 20);
	config_free(&c);
	cr_assert_eq(load("[daemon]\nblock_size = 65536\n" DATASET, &c), 0);
	cr_assert_eq(c.block_bytes, 65536);
	config_free(&c);
}

Test(config, missing_uri_names_section_line)
{
	expect_error("[daemon]\nlog_level = warn\n\n[dataset first]\n"
		     "uri = s3://bucket-a/\n\n[dataset second]\n"
		     "allow_uids = 0\n",
		     ":7: [dataset second] uri: missing required key");
	/* an empty section: its missing uri is still reported */
	expect_error("[dataset empty]\n", ":1: [dataset empty] uri: missing");
}

Test(config, bad_uri)
{
	expect_error("[dataset d]\nuri = https://bucket-a/x\n",
		     ":2: [dataset d] uri: must be an s3:// URI like s3://bucket/prefix/ (got 'https://bucket-a/x')");
	expect_error("[dataset d]\nuri = s3:///x\n", ":2: [dataset d] uri: has no bucket");
	expect_error("[dataset d]\nuri = s3://Bucket/x\n", ":2: [dataset d] uri: bucket name may only hold");
	expect_error("[dataset d]\nuri = s3://ab\n", ":2: [dataset d] uri: bucket name must be 3 to 63");
	expect_error("[dataset d]\nuri = s3://-abc\n", "must begin and end");
	expect_error("[dataset d]\nuri = s3://a..b\n", "'..'");
	expect_error("[dataset d]\nuri = s3://192.168.1.10/\n", "IP address");
	expect_error("[dataset d]\nuri = s3://bucket_a\n", "may only hold");
	expect_error("[dataset d]\nuri = s3://bucket-a//x\n", "empty path segment");
	expect_error("[dataset d]\nuri = s3://bucket-a/x//y\n", "empty path segment");
}

Test(config, prefix_normalisation)
{
	struct rc_config c;
	cr_assert_eq(load("[dataset a]\nuri = s3://bucket-a/p/q/\n"
			  "[dataset b]\nuri = s3://bucket-b/\n"
			  "[dataset c]\nuri = s3://bucket-c/file.bin\n", &c),
		     0, "%s", err);
	cr_assert_str_eq(c.datasets[0].prefix, "p/q/");
	cr_assert_str_eq(c.datasets[1].prefix, "");
	cr_assert_str_eq(c.datasets[1].bucket, "bucket-b");
	cr_assert_str_eq(c.datasets[2].prefix, "file.bin/");
	cr_assert_str_eq(c.datasets[2].uri, "s3://bucket-c/file.bin");
	config_free(&c);
}

Test(config, duplicate_dataset)
{
	expect_error("[dataset d]\nuri = s3://bucket-a/\n\n[dataset d]\n"
		     "uri = s3://bucket-b/\n",
		     ":4: [dataset d]: duplicate dataset (first defined on line 1)");
}

Test(config, bad_dataset_name)
{
	expect_error("[dataset a/b]\nuri = s3://bucket-a/\n",
		     ":1: [dataset a/b]: bad dataset name");
	expect_error("[dataset]\nuri = s3://bucket-a/\n",
		     ":1: [dataset]: a dataset section needs a name");
	/* 64 characters: one too many */
	expect_error("[dataset "
		     "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234"
		     "]\nuri = s3://bucket-a/\n", ":1: [dataset abcdefghij");
	struct rc_config c;
	cr_assert_eq(load("[dataset "
			  "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123"
			  "]\nuri = s3://bucket-a/\n", &c), 0, "%s", err);
	cr_assert_eq(strlen(c.datasets[0].name), 63);
	config_free(&c);
}

Test(config, unknown_section)
{
	expect_error(DATASET "\n[deamon]\n",
		     ":4: [deamon]: unknown section (valid: [daemon], [s3], [dataset NAME])");
	expect_error("[daemon\nsocket = /tmp/x\n" DATASET,
		     ":1: section header is missing its closing ']'");
	expect_error("[s3]\n[s3]\n" DATASET,
		     ":2: [s3]: section appears twice (first on line 1)");
}

Test(config, bad_octal_socket_mode)
{
	expect_error("[daemon]\nsocket_mode = 0980\n" DATASET,
		     ":2: [daemon] socket_mode: must be octal permission bits from 0000 to 0777 (got '0980')");
	expect_error("[daemon]\nsocket_mode = 01777\n" DATASET,
		     ":2: [daemon] socket_mode:");
	expect_error("[daemon]\nsocket_mode = rw\n" DATASET,
		     ":2: [daemon] socket_mode:");
	struct rc_config c;
	cr_assert_eq(load("[daemon]\nsocket_mode = 666\n" DATASET, &c), 0);
	cr_assert_eq(c.socket_mode, 0666);
	config_free(&c);
}

Test(config, duplicate_key)
{
	expect_error("[daemon]\nmemory = 1G\nlog_level = info\nmemory = 2G\n"
		     DATASET,
		     ":4: [daemon] memory: duplicate key (first set on line 2)");
	expect_error(DATASET "uri = s3://bucket-b/\n",
		     ":3: [dataset d] uri: duplicate key (first set on line 2)");
}

Test(config, numbers_out_of_range)
{
	expect_error("[s3]\nmax_connections = 0\n" DATASET,
		     ":2: [s3] max_connections: must be a whole number from 1 to 1024 (got '0')");
	expect_error("[s3]\nmax_connections = 1025\n" DATASET,
		     "[s3] max_connections:");
	expect_error("[s3]\nmax_retries = 21\n" DATASET, "[s3] max_retries:");
	expect_error("[s3]\nmax_retries = -1\n" DATASET, "[s3] max_retries:");
	expect_error("[s3]\nretry_budget = 0\n" DATASET,
		     "[s3] retry_budget: must be a whole number from 1 to 86400 (got '0')");
	expect_error("[s3]\nretry_budget = 86401\n" DATASET, "[s3] retry_budget:");
	expect_error("[daemon]\nmax_sessions = 12abc\n" DATASET,
		     "[daemon] max_sessions:");
	expect_error("[daemon]\nmetadata_ttl = 99999999999999999999\n" DATASET,
		     "[daemon] metadata_ttl:");
}

Test(config, bad_enums_and_paths)
{
	expect_error("[daemon]\nlog_level = verbose\n" DATASET,
		     ":2: [daemon] log_level: must be one of error, warn, info, debug (got 'verbose')");
	expect_error("[s3]\naddressing = dns\n" DATASET,
		     ":2: [s3] addressing: must be path or virtual");
	expect_error("[s3]\ncredentials = magic\n" DATASET,
		     ":2: [s3] credentials: must be one of auto,");
	expect_error("[daemon]\nsocket = relative.sock\n" DATASET,
		     ":2: [daemon] socket: must be an absolute path");
	expect_error("[daemon]\nsocket = /tmp/"
		     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		     "\n" DATASET, "limit of a Unix socket path");
	expect_error("[s3]\nca_file = /nonexistent/ca.pem\n" DATASET,
		     ":2: [s3] ca_file: cannot read the file: No such file or directory");
	expect_error("[s3]\nregion = us east\n" DATASET, ":2: [s3] region:");
}

Test(config, bad_endpoint)
{
	expect_error("[s3]\nendpoint = ftp://host\n" DATASET,
		     ":2: [s3] endpoint: must start with http:// or https:// (got 'ftp://host')");
	expect_error("[s3]\nendpoint = 127.0.0.1:9080\n" DATASET,
		     "[s3] endpoint: must start with");
	expect_error("[s3]\nendpoint = http://\n" DATASET, "has no host");
	expect_error("[s3]\nendpoint = http://host:99999\n" DATASET,
		     "has a bad port");
	expect_error("[s3]\nendpoint = http://host:\n" DATASET, "has a bad port");
	expect_error("[s3]\nendpoint = http://u:p@host\n" DATASET,
		     "must not contain user info");
	expect_error("[s3]\nendpoint = http://host/?x=1\n" DATASET,
		     "query or fragment");
	struct rc_config c;
	cr_assert_eq(load("[s3]\nendpoint = http://[::1]:9080\n" DATASET, &c),
		     0, "%s", err);
	cr_assert_str_eq(c.endpoint, "http://[::1]:9080");
	config_free(&c);
}

Test(config, secret_never_echoed)
{
	const char *secret = "SuPeRsEcReT123";
	/* bad value of a secret key */
	expect_error("[s3]\naccess_key = AKID\nsecret_key = SuPeRsEcReT123 x\n"
		     DATASET, ":3: [s3] secret_key: must not contain spaces or control characters (value hidden)");
	cr_assert_null(strstr(err, secret), "%s", err);
	expect_error("[s3]\naccess_key = AKID\nsession_token = SuPeRsEcReT123 x\n"
		     DATASET, "(value hidden)");
	cr_assert_null(strstr(err, secret), "%s", err);
	/* a secret with no access key */
	expect_error("[s3]\nsecret_key = SuPeRsEcReT123\n" DATASET,
		     ":2: [s3] secret_key: secret_key is set but access_key is missing");
	cr_assert_null(strstr(err, secret), "%s", err);
	/* a line that is not key = value */
	expect_error("[s3]\nsecret_key SuPeRsEcReT123\n" DATASET,
		     ":2: syntax error");
	cr_assert_null(strstr(err, secret), "%s", err);
	/* written twice */
	expect_error("[s3]\naccess_key = A\nsecret_key = SuPeRsEcReT123\n"
		     "secret_key = SuPeRsEcReT123\n" DATASET,
		     ":4: [s3] secret_key: duplicate key");
	cr_assert_null(strstr(err, secret), "%s", err);
}

Test(config, credential_pairs)
{
	expect_error("[s3]\nregion = us-east-1\naccess_key = AKID\n" DATASET,
		     ":3: [s3] access_key: access_key is set but secret_key is missing: set both access_key and secret_key");
	expect_error("[s3]\n\ncredentials = config\n" DATASET,
		     ":3: [s3] credentials: credentials = config requires access_key and secret_key");
	expect_error("[s3]\nsession_token = T\n" DATASET,
		     ":2: [s3] session_token: session_token needs access_key and secret_key");
}

Test(config, missing_file_names_path)
{
	struct rc_config c;
	const char *path = "/nonexistent-dir/ringcache.conf";
	cr_assert_eq(config_load(path, &c, err, sizeof(err)), -1);
	cr_assert_str_eq(err, "/nonexistent-dir/ringcache.conf: cannot open config file: No such file or directory");
	cr_assert_eq(config_load("/tmp", &c, err, sizeof(err)), -1);
	cr_assert_str_eq(err, "/tmp: is a directory, not a config file");
	cr_assert_eq(config_load(NULL, &c, err, sizeof(err)), -1);
	cr_assert_eq(config_load(path, &c, NULL, 0), -1, "no err buffer");
}

Test(config, no_dataset_and_stray_keys)
{
	expect_error("[daemon]\nlog_level = info\n",
		     "no dataset configured: add a [dataset NAME] section");
	expect_error("log_level = info\n" DATASET,
		     ":1: log_level: key outside of any section");
	expect_error("[daemon]\nlog_level =\n" DATASET,
		     ":2: [daemon] log_level: empty value");
	expect_error("[daemon]\njust some words\n" DATASET, ":2: syntax error");
}

Test(config, overlong_line)
{
	char text[600];
	snprintf(text, sizeof(text), "[daemon]\nsocket = /tmp/%0300d\n" DATASET,
		 0);
	expect_error(text, ":2: [daemon]: line is longer than");
}

Test(config, comments_crlf_indent_and_bom)
{
	struct rc_config c;
	cr_assert_eq(load("\xEF\xBB\xBF[daemon] ; the daemon\r\n"
			  "  memory = 256M ; inline comment\r\n"
			  "\tmlock = on\r\n"
			  "[dataset d]\r\nuri = s3://bucket-a/x\r\n", &c),
		     0, "%s", err);
	cr_assert_eq(c.memory_bytes, 256ull << 20);
	cr_assert(c.mlock);
	cr_assert_str_eq(c.datasets[0].prefix, "x/");
	config_free(&c);
}

Test(config, uid_gid_lists)
{
	struct rc_config c;
	cr_assert_eq(load("[dataset d]\nuri = s3://bucket-a/\n"
			  "allow_uids = root, 1001 ,65534\n"
			  "allow_gids = root,27\n", &c), 0, "%s", err);
	struct rc_dataset_config *d = &c.datasets[0];
	cr_assert_eq(d->n_uids, 3);
	cr_assert_eq(d->uids[0], 0);
	cr_assert_eq(d->uids[1], 1001);
	cr_assert_eq(d->uids[2], 65534);
	cr_assert_eq(d->n_gids, 2);
	cr_assert_eq(d->gids[0], 0);
	cr_assert_eq(d->gids[1], 27);
	config_free(&c);

	expect_error(DATASET "allow_uids = root, no-such-user-xyz\n",
		     ":3: [dataset d] allow_uids: unknown user 'no-such-user-xyz' (got 'root, no-such-user-xyz')");
	expect_error(DATASET "allow_gids = no-such-group-xyz\n",
		     ":3: [dataset d] allow_gids: unknown group 'no-such-group-xyz'");
	expect_error(DATASET "allow_uids = 1,,2\n", "has an empty entry");
	expect_error(DATASET "allow_uids = 1,\n", "has an empty entry");
	expect_error(DATASET "allow_uids = 1, *\n", "'*' must be the only entry");
	expect_error(DATASET "allow_gids = *\n", "use allow_uids = *");
	expect_error(DATASET "allow_uids = 4294967295\n", "is not a valid uid");
	expect_error(DATASET "allow_uids = 12x\n", "is not a valid uid");
}

Test(config, secure_default_admits_only_daemon_user)
{
	struct rc_config c;
	cr_assert_eq(load(DATASET, &c), 0, "%s", err);
	struct rc_dataset_config *d = &c.datasets[0];
	cr_assert_not(d->allow_all);
	cr_assert_eq(d->n_uids, 1);
	cr_assert_eq(d->uids[0], geteuid());
	cr_assert_eq(d->n_gids, 0);
	uid_t other = geteuid() == 4242 ? 4243 : 4242;
	cr_assert(config_dataset_allows(d, geteuid(), 4242, NULL, 0));
	cr_assert(config_dataset_allows(d, 0, 4242, NULL, 0));
	cr_assert_not(config_dataset_allows(d, other, 4242, NULL, 0));
	config_free(&c);
}

Test(config, allow_semantics)
{
	uid_t uids[] = {1001, 1002};
	gid_t gids[] = {500};
	struct rc_dataset_config d = {.uids = uids, .n_uids = 2,
				      .gids = gids, .n_gids = 1};
	gid_t groups[] = {10, 500, 20};
	cr_assert(config_dataset_allows(&d, 1001, 9, NULL, 0));
	cr_assert(config_dataset_allows(&d, 1002, 9, NULL, 0));
	cr_assert_not(config_dataset_allows(&d, 1003, 9, NULL, 0));
	cr_assert(config_dataset_allows(&d, 1003, 500, NULL, 0), "primary gid");
	cr_assert(config_dataset_allows(&d, 1003, 9, groups, 3),
		  "supplementary gid");
	cr_assert_not(config_dataset_allows(&d, 1003, 9, groups, 1),
		      "only ngroups entries count");
	cr_assert(config_dataset_allows(&d, 0, 0, NULL, 0), "root");

	struct rc_dataset_config none = {0};
	cr_assert_not(config_dataset_allows(&none, 1001, 500, groups, 3));
	cr_assert(config_dataset_allows(&none, 0, 0, NULL, 0));
	struct rc_dataset_config all = {.allow_all = true};
	cr_assert(config_dataset_allows(&all, 12345, 12345, NULL, 0));
}

#ifndef RC_SOURCE_DIR
#define RC_SOURCE_DIR "."
#endif

Test(config, shipped_example_config_loads)
{
	struct rc_config c;
	const char *path = RC_SOURCE_DIR "/contrib/ringcache.conf";
	cr_assert_eq(config_load(path, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_geq(c.n_datasets, 1);
	cr_assert(c.tls_verify);
	cr_assert_eq(c.creds_source, CREDS_AUTO);
	config_free(&c);
}

Test(config, shipped_demo_config_loads)
{
	struct rc_config c;
	const char *path = RC_SOURCE_DIR "/contrib/ringcache-local.conf";
	cr_assert_eq(config_load(path, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(c.endpoint, "http://127.0.0.1:9080");
	cr_assert_eq(c.addressing, S3_PATH_STYLE);
	cr_assert_not(c.tls_verify);
	cr_assert_eq(c.creds_source, CREDS_CONFIG);
	cr_assert_str_eq(c.access_key, "TESTACCESSKEY");
	cr_assert_str_eq(c.secret_key, "TESTSECRETKEY");
	cr_assert_str_eq(c.socket_path, "/tmp/ringcache-demo/ringcache.sock");
	cr_assert_eq(c.memory_bytes, 512ull << 20);
	cr_assert_eq(c.n_datasets, 1);
	cr_assert_str_eq(c.datasets[0].name, "sample");
	cr_assert_str_eq(c.datasets[0].bucket, "ringcache-demo");
	cr_assert_str_eq(c.datasets[0].prefix, "sample/");
	config_free(&c);
}

Test(config, limits_per_uid_and_session)
{
	struct rc_config c;
	cr_assert_eq(load(DATASET, &c), 0, "%s", err);
	cr_assert_eq(c.root_reserved_sessions, 4);
	cr_assert_eq(c.max_sessions_per_uid, 128);
	cr_assert_eq(c.max_leased_per_session, 0, "0: memory/4");
	cr_assert_eq(c.max_leased_per_uid, 0, "0: memory/2");
	cr_assert_eq(c.max_pinned_per_uid, 0, "0: memory/4");
	cr_assert_eq(c.max_inflight_per_session, 0, "0: memory/4");
	cr_assert_eq(c.max_inflight_per_uid, 0, "0: memory/2");
	cr_assert_eq(c.max_plan_entries, 1u << 20);
	cr_assert_eq(c.max_plan_entries_per_uid, 4u << 20);
	cr_assert_eq(c.max_handles, 1u << 20);
	cr_assert_eq(c.max_registered, 1ull << 30);
	cr_assert_eq(c.max_handles_per_uid, 4u << 20);
	cr_assert_eq(c.max_leases_per_uid, 4u << 20);
	cr_assert_eq(c.max_registered_per_uid, 4ull << 30);
	cr_assert_eq(c.max_staged_per_uid, 0, "0: staging_memory/2");
	config_free(&c);
	cr_assert_eq(load("[daemon]\nroot_reserved_sessions = 0\n"
			  "max_sessions_per_uid = 3\n"
			  "max_leased_per_session = 8M\n"
			  "max_leased_per_uid = 1G\n"
			  "max_pinned_per_uid = 64M\n"
			  "max_inflight_per_session = 2M\n"
			  "max_inflight_per_uid = 3M\n"
			  "max_plan_entries = 1000\n"
			  "max_plan_entries_per_uid = 5000\n"
			  "max_handles = 10\n"
			  "max_registered = 4K\n"
			  "max_handles_per_uid = 20\n"
			  "max_leases_per_uid = 30\n"
			  "max_registered_per_uid = 8K\n"
			  "max_staged_per_uid = 64M\n"
			  "metadata_memory = 3M\n" DATASET, &c), 0,
		     "%s", err);
	cr_assert_eq(c.root_reserved_sessions, 0);
	cr_assert_eq(c.max_sessions_per_uid, 3);
	cr_assert_eq(c.max_leased_per_session, 8u << 20);
	cr_assert_eq(c.max_leased_per_uid, 1u << 30);
	cr_assert_eq(c.max_pinned_per_uid, 64u << 20);
	cr_assert_eq(c.max_inflight_per_session, 2u << 20);
	cr_assert_eq(c.max_inflight_per_uid, 3u << 20);
	cr_assert_eq(c.max_plan_entries, 1000);
	cr_assert_eq(c.max_plan_entries_per_uid, 5000);
	cr_assert_eq(c.max_handles, 10);
	cr_assert_eq(c.max_registered, 4096);
	cr_assert_eq(c.max_handles_per_uid, 20);
	cr_assert_eq(c.max_leases_per_uid, 30);
	cr_assert_eq(c.max_registered_per_uid, 8192);
	cr_assert_eq(c.max_staged_per_uid, 64u << 20);
	cr_assert_eq(c.metadata_bytes, 3u << 20);
	config_free(&c);
	expect_error("[daemon]\nmax_plan_entries = 16777217\n" DATASET,
		     "[daemon] max_plan_entries:");
	expect_error("[daemon]\nmax_handles = 0\n" DATASET,
		     "[daemon] max_handles:");
	expect_error("[daemon]\nmax_registered = 1K\n" DATASET,
		     "[daemon] max_registered:");
	expect_error("[daemon]\nmax_leased_per_uid = lots\n" DATASET,
		     "[daemon] max_leased_per_uid:");
	expect_error("[daemon]\nmax_leases_per_uid = 0\n" DATASET,
		     "[daemon] max_leases_per_uid:");
	expect_error("[daemon]\nmax_registered_per_uid = 1K\n" DATASET,
		     "[daemon] max_registered_per_uid:");
}

Test(config, every_error_is_reported_in_one_run)
{
	struct rc_config c;
	cr_assert_eq(load("[daemon]\n"
			  "memory = lots\n"         /* 2 */
			  "just some words\n"       /* 3 */
			  "log_level = loud\n"      /* 4 */
			  "[s3]\n"
			  "region = us east\n"      /* 6 */
			  "credentials_file = /nonexistent/creds\n" /* 7 */
			  "[dataset a]\n"
			  "uri = http://x\n"        /* 9 */
			  "[dataset b]\n"           /* 10: no uri */
			  "allow_uids = 1000\n", &c), -1);
	static const char *const want[] = {
		":2: [daemon] memory: must be a size",
		":3: syntax error",
		":4: [daemon] log_level: must be one of",
		":6: [s3] region: must be a region name",
		":7: [s3] credentials_file: cannot read the file: No such file or directory",
		":9: [dataset a] uri: must be an s3:// URI",
		":10: [dataset b] uri: missing required key",
	};
	const char *at = err;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const char *hit = strstr(at, want[i]);
		cr_assert(hit, "expected '%s' (in order) in:\n%s", want[i], err);
		at = hit;
	}
	size_t lines = 1;
	for (const char *p = err; *p; p++)
		lines += *p == '\n';
	cr_assert_eq(lines, sizeof(want) / sizeof(want[0]),
		     "one line per error, no follow-on errors:\n%s", err);
	cr_assert_null(c.path, "config not freed on error");
}

Test(config, too_many_errors_are_counted)
{
	char text[8192] = "[daemon]\n";
	for (int i = 0; i < 80; i++)
		strcat(text, "mlock = maybe\n");
	strcat(text, DATASET);
	struct rc_config c;
	cr_assert_eq(load(text, &c), -1);
	cr_assert(strstr(err, "more error(s)"), "no count of the rest: %s", err);
	cr_assert(strlen(err) < sizeof(err));
}

Test(config, inline_comments_end_a_value)
{
	struct rc_config c;
	cr_assert_eq(load("[daemon] # the daemon\n"
			  "memory = 256M # hash comment\n"
			  "log_level = debug ; semicolon comment\n"
			  "[s3]\nprofile = train;ing\n"
			  "[dataset d]\nuri = s3://bucket-a/x#y ; not part of it\n"
			  "allow_uids = 1000 ; 1001\n", &c),
		     0, "%s", err);
	cr_assert_eq(c.memory_bytes, 256ull << 20);
	cr_assert_eq(c.log_level, 3);
	/* Without a blank before it, ';' or '#' is part of the value. */
	cr_assert_str_eq(c.profile, "train;ing");
	cr_assert_str_eq(c.datasets[0].prefix, "x#y/");
	cr_assert_eq(c.datasets[0].n_uids, 1);
	cr_assert_eq(c.datasets[0].uids[0], 1000);
	config_free(&c);
}

/* A directory (or a device) passed access(R_OK) and failed only at
 * start, without a file and line: the check names them. */
Test(config, credentials_file_must_be_a_regular_file)
{
	char dir[] = "/tmp/rc-test-creds-XXXXXX", text[512];
	cr_assert_not_null(mkdtemp(dir));
	snprintf(text, sizeof(text), "[s3]\ncredentials = file\n"
		 "credentials_file = %s\n" DATASET, dir);
	char want[256];
	snprintf(want, sizeof(want), ":3: [s3] credentials_file: not a "
		 "regular file (a directory) (got '%s')", dir);
	expect_error(text, want);
	expect_error("[s3]\ncredentials_file = /dev/null\n" DATASET,
		     ":2: [s3] credentials_file: not a regular file (a device, "
		     "socket or pipe) (got '/dev/null')");
	/* A readable regular file passes. */
	char file[300];
	snprintf(file, sizeof(file), "%s/credentials", dir);
	FILE *f = fopen(file, "w");
	cr_assert(f && fputs("[default]\n", f) >= 0 && fclose(f) == 0);
	snprintf(text, sizeof(text), "[s3]\ncredentials_file = %s\n" DATASET,
		 file);
	struct rc_config c;
	cr_assert_eq(load(text, &c), 0, "%s", err);
	cr_assert_str_eq(c.credentials_file, file);
	config_free(&c);
	/* Unreadable (mode 0): cannot read, unless root reads anything. */
	if (geteuid() != 0) {
		cr_assert_eq(chmod(file, 0), 0);
		expect_error(text, ":2: [s3] credentials_file: cannot read the "
			     "file: Permission denied");
	}
	unlink(file);
	rmdir(dir);
}

Test(config, missing_credentials_file_fails_the_check)
{
	expect_error("[s3]\ncredentials = file\n"
		     "credentials_file = /nonexistent/aws-credentials\n" DATASET,
		     ":3: [s3] credentials_file: cannot read the file: No such file or directory (got '/nonexistent/aws-credentials')");
}

Test(config, overlapping_datasets_with_different_acls_are_refused)
{
	/* A root-only dataset inside a public one. */
	expect_error("[dataset public]\nuri = s3://bucket-a/data/\n"
		     "allow_uids = *\n"
		     "[dataset secret]\nuri = s3://bucket-a/data/secret/\n"
		     "allow_uids = 0\n",
		     ":4: [dataset secret] uri: s3://bucket-a/data/secret/ overlaps dataset public (line 1, s3://bucket-a/data/)");
	/* Equal prefixes, the nested one first, the whole bucket. */
	expect_error("[dataset a]\nuri = s3://bucket-a/x\nallow_uids = 1000\n"
		     "[dataset b]\nuri = s3://bucket-a/x/\nallow_uids = 1001\n",
		     ":4: [dataset b] uri: s3://bucket-a/x/ overlaps dataset a");
	expect_error("[dataset inner]\nuri = s3://bucket-a/x/y\nallow_uids = 1000\n"
		     "[dataset all]\nuri = s3://bucket-a\nallow_uids = *\n",
		     "[dataset all] uri: s3://bucket-a/ overlaps dataset inner");
	/* Same readers, different writers. */
	expect_error("[daemon]\njournal = /tmp/j\n"
		     "[dataset a]\nuri = s3://bucket-a/x\nallow_uids = *\n"
		     "[dataset b]\nuri = s3://bucket-a/x/ckpt\nallow_uids = *\n"
		     "writable = true\nwrite_uids = 1000\n",
		     "[dataset b] uri: s3://bucket-a/x/ckpt/ overlaps dataset a");
}

Test(config, disjoint_or_equally_guarded_datasets_load)
{
	struct rc_config c;
	cr_assert_eq(load("[dataset a]\nuri = s3://bucket-a/img\nallow_uids = 1000\n"
			  "[dataset b]\nuri = s3://bucket-a/img2\nallow_uids = 1001\n"
			  "[dataset c]\nuri = s3://bucket-b/img\nallow_uids = *\n"
			  "[dataset d]\nuri = s3://bucket-a/img/sub\nallow_uids = 1000\n"
			  "[dataset e]\nuri = s3://bucket-a/other\n"
			  "[dataset f]\nuri = s3://bucket-a/other/sub\n", &c),
		     0, "%s", err);
	cr_assert_eq(c.n_datasets, 6);
	config_free(&c);
}

Test(config, overwrite_key_of_a_dataset)
{
	struct rc_config cfg;
	cr_assert_eq(load(DATASET "overwrite = false\n", &cfg), 0, "%s", err);
	cr_assert(cfg.datasets[0].no_overwrite);
	config_free(&cfg);
	cr_assert_eq(load(DATASET, &cfg), 0, "%s", err);
	cr_assert(!cfg.datasets[0].no_overwrite, "the default overwrites");
	config_free(&cfg);
	expect_error(DATASET "overwrite = maybe\n",
		     "[dataset d] overwrite: must be true or false (got 'maybe')");
}

/* RENAME after upload: CopyObject up to it, a multipart copy above. */
Test(config, copy_threshold_of_a_dataset)
{
	struct rc_config cfg;
	cr_assert_eq(load(DATASET, &cfg), 0, "%s", err);
	cr_assert_eq(cfg.datasets[0].copy_threshold, 5ull << 30,
		     "S3's CopyObject limit");
	config_free(&cfg);
	cr_assert_eq(load(DATASET "copy_threshold = 5M\n", &cfg), 0, "%s", err);
	cr_assert_eq(cfg.datasets[0].copy_threshold, 5ull << 20);
	config_free(&cfg);
	static const char *const bad[] = { "4M", "6G", "-1", "5Mx", "5.5.5M",
					   "99999999999999999999", "0x10M" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[256], want[128];
		snprintf(text, sizeof(text), DATASET "copy_threshold = %s\n",
			 bad[i]);
		snprintf(want, sizeof(want), "[dataset d] copy_threshold: must "
			 "be a size from 5M to 5G");
		expect_error(text, want);
	}
}

/* arena_prefault: unset, 16M a shard; a size of at least one 2 MiB
 * populate step; 0, off; a size below the step or no size names the key
 * and what it takes. */
Test(config, arena_prefault)
{
	struct rc_config cfg;
	cr_assert_eq(load(DATASET, &cfg), 0, "%s", err);
	cr_assert_eq(cfg.arena_prefault_bytes, 16ull << 20, "unset: 16M");
	config_free(&cfg);
	cr_assert_eq(load("[daemon]\narena_prefault = 64M\n" DATASET, &cfg), 0,
		     "%s", err);
	cr_assert_eq(cfg.arena_prefault_bytes, 64ull << 20);
	config_free(&cfg);
	cr_assert_eq(load("[daemon]\narena_prefault = 0\n" DATASET, &cfg), 0,
		     "%s", err);
	cr_assert_eq(cfg.arena_prefault_bytes, 0);
	config_free(&cfg);
	expect_error("[daemon]\narena_prefault = 1M\n" DATASET,
		     "at least 2M");
	expect_error("[daemon]\narena_prefault = lots\n" DATASET,
		     "arena_prefault");
}

/* staging_warm: unset, all of staging_memory (UINT64_MAX, capped by the
 * shard); a size, that size; 0, none; anything else names the key. */
Test(config, staging_warm)
{
	struct rc_config cfg;
	cr_assert_eq(load(DATASET, &cfg), 0, "%s", err);
	cr_assert_eq(cfg.staging_warm_bytes, UINT64_MAX,
		     "unset: all of staging_memory");
	config_free(&cfg);
	cr_assert_eq(load("[daemon]\nstaging_warm = 256M\n" DATASET, &cfg), 0,
		     "%s", err);
	cr_assert_eq(cfg.staging_warm_bytes, 256ull << 20);
	config_free(&cfg);
	cr_assert_eq(load("[daemon]\nstaging_warm = 0\n" DATASET, &cfg), 0,
		     "%s", err);
	cr_assert_eq(cfg.staging_warm_bytes, 0);
	config_free(&cfg);
	expect_error("[daemon]\nstaging_warm = lots\n" DATASET,
		     "staging_warm");
}

/* A size below a key's least names the least, not a size's syntax (a
 * journal_size of 1M is a size; "must be a size like 512M" misled). */
Test(config, a_size_below_the_least_says_the_least)
{
	expect_error("[daemon]\njournal_size = 1M\n" DATASET,
		     "[daemon] journal_size: must be at least 16M (got '1M')");
	expect_error("[daemon]\nstaging_memory = 8M\n" DATASET,
		     "[daemon] staging_memory: must be at least 16M (got '8M')");
	expect_error("[daemon]\ntier_size = 8M\n" DATASET,
		     "[daemon] tier_size: must be at least 16M (got '8M')");
	expect_error("[daemon]\nmax_registered = 100\n" DATASET,
		     "[daemon] max_registered: must be at least 4096 bytes");
	expect_error("[daemon]\njournal_size = lots\n" DATASET,
		     "[daemon] journal_size: must be a size like 512M or 8G");
}

/* nice: -5 unless written; the whole range loads, anything else names
 * the range. */
Test(config, nice)
{
	struct rc_config c;
	cr_assert_eq(load(DATASET, &c), 0, "%s", err);
	cr_assert_eq(c.nice, -5);
	cr_assert_not(config_written(&c, "daemon", "nice"));
	config_free(&c);
	static const struct {
		const char *value;
		int nice;
	} ok[] = {{"-20", -20}, {"19", 19}, {"0", 0}, {"-0", 0}, {"7", 7}};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char text[256];
		snprintf(text, sizeof(text), "[daemon]\nnice = %s\n" DATASET,
			 ok[i].value);
		cr_assert_eq(load(text, &c), 0, "%s: %s", ok[i].value, err);
		cr_assert_eq(c.nice, ok[i].nice, "%s", ok[i].value);
		cr_assert(config_written(&c, "daemon", "nice"));
		config_free(&c);
	}
	static const char *const bad[] = {"-21", "20", "+3", "--1", "- 1",
					  "-", "1.5", "high", "4294967291"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[256], want[128];
		snprintf(text, sizeof(text), "[daemon]\nnice = %s\n" DATASET,
			 bad[i]);
		snprintf(want, sizeof(want),
			 "[daemon] nice: must be a whole number from -20 to 19 "
			 "(got '%s')", bad[i]);
		expect_error(text, want);
	}
}

/* The Prometheus endpoint: off unless set; a bare port is loopback; any
 * other address only as written; bad values name the key. */
Test(config, metrics_listen)
{
	struct rc_config c;
	cr_assert_eq(load(DATASET, &c), 0, "%s", err);
	cr_assert_eq(c.metrics_port, 0, "off by default");
	config_free(&c);
	static const struct {
		const char *value, *host;
		unsigned port;
	} ok[] = {
		{"9464", "127.0.0.1", 9464},
		{":9464", "127.0.0.1", 9464},
		{"localhost:1", "127.0.0.1", 1},
		{"127.0.0.1:65535", "127.0.0.1", 65535},
		{"0.0.0.0:9464", "0.0.0.0", 9464},
		{"10.1.2.3:80", "10.1.2.3", 80},
		{"[::1]:9464", "::1", 9464},
		{"[::]:9464", "::", 9464},
	};
	char text[256];
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		snprintf(text, sizeof(text),
			 "[daemon]\nmetrics_listen = %s\n" DATASET, ok[i].value);
		cr_assert_eq(load(text, &c), 0, "%s: %s", ok[i].value, err);
		cr_assert_str_eq(c.metrics_host, ok[i].host, "%s", ok[i].value);
		cr_assert_eq(c.metrics_port, ok[i].port, "%s", ok[i].value);
		config_free(&c);
	}
	static const char *const bad[] = {
		"0", "65536", "127.0.0.1:", "127.0.0.1", "host.example:80",
		"::1:9464", "[::1]", "[::1]9464", "[127.0.0.1]:80",
		"1.2.3.4:80x", "-1", "127.0.0.1:+80", "256.0.0.1:80",
		"[::1:80", "localhost:0",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text),
			 "[daemon]\nmetrics_listen = %s\n" DATASET, bad[i]);
		expect_error(text, ":2: [daemon] metrics_listen: must be HOST:PORT");
	}
}

Test(config, request_budget_keys_of_a_dataset)
{
	struct rc_config cfg;
	cr_assert_eq(load(DATASET, &cfg), 0, "%s", err);
	cr_assert_eq(cfg.datasets[0].s3_get_rate, 5500, "S3's GET rate");
	cr_assert_eq(cfg.datasets[0].s3_put_rate, 3500, "S3's PUT rate");
	config_free(&cfg);
	cr_assert_eq(load(DATASET "s3_get_rate = 200\ns3_put_rate = 0\n", &cfg),
		     0, "%s", err);
	cr_assert_eq(cfg.datasets[0].s3_get_rate, 200);
	cr_assert_eq(cfg.datasets[0].s3_put_rate, 0, "0: not shaped");
	config_free(&cfg);
	expect_error(DATASET "s3_get_rate = fast\n",
		     "[dataset d] s3_get_rate: must be requests/s from 0 (off) "
		     "to 1000000 (got 'fast')");
	expect_error(DATASET "s3_put_rate = -1\n",
		     "[dataset d] s3_put_rate: must be requests/s from 0 (off) "
		     "to 1000000 (got '-1')");
}
