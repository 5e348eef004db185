/* Interface selection over fake interface lists, address text, and this host's interfaces. */
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>

#include "bootstrap/bootstrap.h"
#include "unit.h"

static socket_iface_t fake(const char* name, const char* ip) {
  socket_iface_t c;
  memset(&c, 0, sizeof(c));
  snprintf(c.name, sizeof(c.name), "%s", name);
  if (strchr(ip, ':')) {
    c.addr.sin6.sin6_family = AF_INET6;
    ck_assert_int_eq(inet_pton(AF_INET6, ip, &c.addr.sin6.sin6_addr), 1);
  } else {
    c.addr.sin.sin_family = AF_INET;
    ck_assert_int_eq(inet_pton(AF_INET, ip, &c.addr.sin.sin_addr), 1);
  }
  return c;
}

/* A host with loopback, docker, two ethernets (one IPv6-only) and an IB interface. */
static int full_host(socket_iface_t* c) {
  int n = 0;
  c[n++] = fake("lo", "127.0.0.1");
  c[n++] = fake("docker0", "172.17.0.1");
  c[n++] = fake("eth0", "fe80::1");
  c[n++] = fake("eth0", "10.0.0.1");
  c[n++] = fake("eth1", "2001:db8::5");
  c[n++] = fake("ib0", "192.168.1.1");
  c[n++] = fake("lo", "::1");
  return n;
}

/* Selects and returns the chosen names joined by spaces. */
static const char* pick(const socket_iface_t* c, int n, const char* spec, int family, int max) {
  static char names[256];
  socket_iface_t out[16];
  int nout = -1;
  ck_assert_int_eq(socket_select_interfaces(c, n, spec, family, out, max, &nout), ncclSuccess);
  ck_assert_int_ge(nout, 0);
  ck_assert_int_le(nout, max);
  names[0] = '\0';
  for (int i = 0; i < nout; i++) {
    strcat(names, i ? " " : "");
    strcat(names, out[i].name);
  }
  return names;
}

static int family_of(const socket_iface_t* c, int n, const char* spec, int family) {
  socket_iface_t out[4];
  int nout = 0;
  ck_assert_int_eq(socket_select_interfaces(c, n, spec, family, out, 4, &nout), ncclSuccess);
  ck_assert_int_eq(nout, 1);
  return out[0].addr.sa.sa_family;
}

START_TEST(default_prefers_ib) {
  socket_iface_t c[16];
  int n = full_host(c);
  ck_assert_str_eq(pick(c, n, NULL, AF_UNSPEC, 16), "ib0");
  ck_assert_str_eq(pick(c, n, "", AF_UNSPEC, 16), "ib0");
}
END_TEST

START_TEST(default_skips_docker_and_lo) {
  socket_iface_t c[16];
  int n = full_host(c) - 2; /* drop ib0 and lo's v6 */
  ck_assert_str_eq(pick(c, n, NULL, AF_UNSPEC, 16), "eth0 eth1");
  /* One address per interface, IPv4 preferred over the (link-local) v6 listed first. */
  ck_assert_int_eq(family_of(c, n, "eth0", AF_UNSPEC), AF_INET);
}
END_TEST

START_TEST(default_falls_back_to_docker_then_lo) {
  socket_iface_t c[4];
  c[0] = fake("lo", "127.0.0.1");
  c[1] = fake("docker0", "172.17.0.1");
  ck_assert_str_eq(pick(c, 2, NULL, AF_UNSPEC, 16), "docker0");
  ck_assert_str_eq(pick(c, 1, NULL, AF_UNSPEC, 16), "lo");
  ck_assert_str_eq(pick(c, 0, NULL, AF_UNSPEC, 16), "");
}
END_TEST

START_TEST(prefix_list) {
  socket_iface_t c[16];
  int n = full_host(c);
  ck_assert_str_eq(pick(c, n, "eth", AF_UNSPEC, 16), "eth0 eth1");
  ck_assert_str_eq(pick(c, n, "ib,lo", AF_UNSPEC, 16), "lo ib0");
  ck_assert_str_eq(pick(c, n, "docker0,eth1", AF_UNSPEC, 16), "docker0 eth1");
  ck_assert_str_eq(pick(c, n, "wlan", AF_UNSPEC, 16), "");
  ck_assert_str_eq(pick(c, n, "eth", AF_UNSPEC, 1), "eth0");
}
END_TEST

START_TEST(exclude_list) {
  socket_iface_t c[16];
  int n = full_host(c);
  ck_assert_str_eq(pick(c, n, "^eth,lo", AF_UNSPEC, 16), "docker0 ib0");
  ck_assert_str_eq(pick(c, n, "^docker", AF_UNSPEC, 16), "lo eth0 eth1 ib0");
}
END_TEST

START_TEST(exact_names) {
  socket_iface_t c[16];
  int n = full_host(c);
  c[n++] = fake("eth10", "10.1.0.1");
  ck_assert_str_eq(pick(c, n, "=eth", AF_UNSPEC, 16), "");
  ck_assert_str_eq(pick(c, n, "=eth1", AF_UNSPEC, 16), "eth1");
  ck_assert_str_eq(pick(c, n, "eth1", AF_UNSPEC, 16), "eth1 eth10");
  ck_assert_str_eq(pick(c, n, "^=eth1,lo", AF_UNSPEC, 16), "docker0 eth0 ib0 eth10");
}
END_TEST

START_TEST(family_filter) {
  socket_iface_t c[16];
  int n = full_host(c);
  /* eth0's only v6 address is link-local: skipped while a global one exists. */
  ck_assert_str_eq(pick(c, n, "eth", AF_INET6, 16), "eth1");
  ck_assert_str_eq(pick(c, n, "eth", AF_INET, 16), "eth0");
  ck_assert_int_eq(family_of(c, n, "lo", AF_INET6), AF_INET6);
  ck_assert_str_eq(pick(c, n, NULL, AF_INET6, 16), "eth1");
}
END_TEST

START_TEST(link_local_only_as_last_resort) {
  socket_iface_t c[4];
  c[0] = fake("eth0", "fe80::1");
  ck_assert_str_eq(pick(c, 1, "eth", AF_UNSPEC, 16), "eth0");
  c[1] = fake("eth1", "fe80::2");
  c[2] = fake("eth2", "2001:db8::2");
  ck_assert_str_eq(pick(c, 3, "eth", AF_UNSPEC, 16), "eth2");
}
END_TEST

START_TEST(invalid_family_rejected) {
  socket_iface_t c[1] = {fake("lo", "127.0.0.1")};
  socket_iface_t out[1];
  int nout = 7;
  ck_assert_int_eq(socket_select_interfaces(c, 1, NULL, AF_UNIX, out, 1, &nout),
                   ncclInvalidArgument);
  ck_assert_int_eq(nout, 7);
}
END_TEST

START_TEST(addr_parse_and_format) {
  socket_addr_t a;
  char buf[80];
  ck_assert_int_eq(socket_addr_parse("127.0.0.1:1234", &a), ncclSuccess);
  ck_assert_int_eq(a.sa.sa_family, AF_INET);
  ck_assert_int_eq(ntohs(a.sin.sin_port), 1234);
  ck_assert_str_eq(socket_addr_format(&a, buf, sizeof(buf)), "127.0.0.1:1234");

  ck_assert_int_eq(socket_addr_parse("[::1]:80", &a), ncclSuccess);
  ck_assert_int_eq(a.sa.sa_family, AF_INET6);
  ck_assert_str_eq(socket_addr_format(&a, buf, sizeof(buf)), "[::1]:80");
  ck_assert_int_eq(socket_addr_parse("[2001:db8::7]:65535", &a), ncclSuccess);
  ck_assert_str_eq(socket_addr_format(&a, buf, sizeof(buf)), "[2001:db8::7]:65535");

  ck_assert_int_eq(socket_addr_parse("localhost:99", &a), ncclSuccess);
  ck_assert(a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6);
  ck_assert_str_eq(strrchr(socket_addr_format(&a, buf, sizeof(buf)), ':'), ":99");

  socket_addr_t untouched;
  memset(&untouched, 0xab, sizeof(untouched));
  const char* bad[] = {
      "",        "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999",        "127.0.0.1:12x",
      "[::1]80", "[::1",      ":80",        "no.such.host.invalid:80"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    socket_addr_t b = untouched;
    ck_assert_msg(socket_addr_parse(bad[i], &b) != ncclSuccess, "accepted '%s'", bad[i]);
    ck_assert_msg(memcmp(&b, &untouched, sizeof(b)) == 0, "'%s' wrote the output", bad[i]);
  }
  ck_assert_ptr_nonnull(strstr(log_last_error(), "no.such.host.invalid"));
}
END_TEST

START_TEST(host_interfaces_and_env) {
  socket_iface_t list[64];
  int n = 0;
  ck_assert_int_eq(socket_list_interfaces(list, 64, &n), ncclSuccess);
  int lo = -1;
  for (int i = 0; i < n; i++)
    if (strcmp(list[i].name, "lo") == 0 && list[i].addr.sa.sa_family == AF_INET) lo = i;
  ck_assert_msg(lo >= 0, "no IPv4 loopback among %d interfaces", n);

  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  unsetenv("NCCL_SOCKET_FAMILY");
  param_reload();
  const socket_iface_t* chosen = NULL;
  int nchosen = 0;
  ck_assert_int_eq(socket_default_interfaces(&chosen, &nchosen), ncclSuccess);
  ck_assert_int_eq(nchosen, 1);
  ck_assert_str_eq(chosen[0].name, "lo");
  ck_assert_int_eq(chosen[0].addr.sa.sa_family, AF_INET);
  ck_assert_uint_eq(chosen[0].addr.sin.sin_addr.s_addr, htonl(INADDR_LOOPBACK));

  /* A changed spec is honoured (the cache follows the parameters). */
  setenv("NCCL_SOCKET_IFNAME", "=no_such_if0", 1);
  param_reload();
  ck_assert_int_eq(socket_default_interfaces(&chosen, &nchosen), ncclSystemError);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "no_such_if0"));
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  param_reload();
  ck_assert_int_eq(socket_default_interfaces(&chosen, &nchosen), ncclSuccess);
  ck_assert_str_eq(chosen[0].name, "lo");
}
END_TEST

int main(void) {
  Suite* s = suite_create("iface");
  TCase* tc = tcase_create("select");
  tcase_add_test(tc, default_prefers_ib);
  tcase_add_test(tc, default_skips_docker_and_lo);
  tcase_add_test(tc, default_falls_back_to_docker_then_lo);
  tcase_add_test(tc, prefix_list);
  tcase_add_test(tc, exclude_list);
  tcase_add_test(tc, exact_names);
  tcase_add_test(tc, family_filter);
  tcase_add_test(tc, link_local_only_as_last_resort);
  tcase_add_test(tc, invalid_family_rejected);
  suite_add_tcase(s, tc);
  TCase* tc2 = tcase_create("host");
  tcase_add_test(tc2, addr_parse_and_format);
  tcase_add_test(tc2, host_interfaces_and_env);
  suite_add_tcase(s, tc2);
  return unit_run_suite(s);
}
