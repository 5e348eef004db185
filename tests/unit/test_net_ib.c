/* The IB network's pure rules, without a device: NCCL_IB_HCA (stock's syntax), the automatic GID
 * choice, striping a message over QPs, port speeds, merging the ports of one NIC. Expected values
 * are written out by hand from the rules, not computed by the code under test. */
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>

#include "net/ib.h"
#include "unit.h"

/* ---- NCCL_IB_HCA
 * --------------------------------------------------------------------------------- */
START_TEST(hca_unset_or_empty_matches_everything) {
  ib_hca_filter_t f;
  ib_hca_parse(NULL, &f);
  ck_assert(ib_hca_match(&f, "mlx5_0", 1));
  ib_hca_parse("", &f);
  ck_assert(ib_hca_match(&f, "rxe0", 2));
  ib_hca_parse("^", &f); /* nothing listed to exclude */
  ck_assert(ib_hca_match(&f, "mlx5_3", 1));
}
END_TEST

START_TEST(hca_prefixes_ports_exact_and_exclude) {
  ib_hca_filter_t f;
  ib_hca_parse("mlx5", &f);
  ck_assert(!f.exclude && !f.exact);
  ck_assert_int_eq(f.n, 1);
  ck_assert(ib_hca_match(&f, "mlx5_0", 1));
  ck_assert(ib_hca_match(&f, "mlx5_11", 2));
  ck_assert(!ib_hca_match(&f, "rxe0", 1));

  ib_hca_parse("mlx5_0:1,mlx5_1", &f);
  ck_assert_int_eq(f.n, 2);
  ck_assert_str_eq(f.items[0].name, "mlx5_0");
  ck_assert_int_eq(f.items[0].port, 1);
  ck_assert_int_eq(f.items[1].port, -1);
  ck_assert(ib_hca_match(&f, "mlx5_0", 1));
  ck_assert(!ib_hca_match(&f, "mlx5_0", 2));
  ck_assert(ib_hca_match(&f, "mlx5_1", 2));
  ck_assert(ib_hca_match(&f, "mlx5_10", 1)); /* a prefix: mlx5_1 matches mlx5_10 too */

  ib_hca_parse("=mlx5_1", &f);
  ck_assert(f.exact);
  ck_assert(ib_hca_match(&f, "mlx5_1", 1));
  ck_assert(!ib_hca_match(&f, "mlx5_10", 1));

  ib_hca_parse("^mlx5_0:2", &f);
  ck_assert(f.exclude);
  ck_assert(ib_hca_match(&f, "mlx5_0", 1));
  ck_assert(!ib_hca_match(&f, "mlx5_0", 2));
  ck_assert(ib_hca_match(&f, "mlx5_1", 2));

  ib_hca_parse("^=mlx5_1,rxe", &f);
  ck_assert(f.exclude && f.exact);
  ck_assert(!ib_hca_match(&f, "mlx5_1", 1));
  ck_assert(ib_hca_match(&f, "mlx5_10", 1));
  ck_assert(ib_hca_match(&f, "rxe0", 1)); /* exact: "rxe" is not "rxe0" */
  ck_assert(!ib_hca_match(&f, "rxe", 1));
}
END_TEST

START_TEST(hca_odd_input) {
  ib_hca_filter_t f;
  ib_hca_parse(",,mlx5_2:,:3,rxe0:1x,", &f); /* empty items dropped; a bad port means any */
  ck_assert_int_eq(f.n, 2);
  ck_assert_str_eq(f.items[0].name, "mlx5_2");
  ck_assert_int_eq(f.items[0].port, -1);
  ck_assert_str_eq(f.items[1].name, "rxe0");
  ck_assert_int_eq(f.items[1].port, 1);
  char longname[200];
  memset(longname, 'a', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  ib_hca_parse(longname, &f); /* truncated, not overflowed */
  ck_assert_int_eq(f.n, 1);
  ck_assert_uint_eq(strlen(f.items[0].name), IB_NAME_MAX - 1);
  char many[40 * 4];
  many[0] = '\0';
  for (int i = 0; i < 40; i++) strcat(many, "d,");
  ib_hca_parse(many, &f);
  ck_assert_int_eq(f.n, IB_HCA_MAX);
}
END_TEST

/* ---- GIDs --------------------------------------------------------------------------------------
 */
static ib_gid_entry_t gid_v4(const char* ip, int version) {
  ib_gid_entry_t e = {.roce_version = version};
  e.raw[10] = 0xff;
  e.raw[11] = 0xff;
  ck_assert_int_eq(inet_pton(AF_INET, ip, e.raw + 12), 1);
  return e;
}
static ib_gid_entry_t gid_v6(const char* ip, int version) {
  ib_gid_entry_t e = {.roce_version = version};
  ck_assert_int_eq(inet_pton(AF_INET6, ip, e.raw), 1);
  return e;
}

START_TEST(gid_typical_roce_table) {
  /* What a RoCE port with an IPv4 and a global IPv6 address shows: v1 and v2 of each. */
  ib_gid_entry_t tab[8] = {gid_v6("fe80::1", 1),     gid_v6("fe80::1", 2),
                           gid_v4("10.1.2.3", 1),    gid_v4("10.1.2.3", 2),
                           gid_v6("2001:db8::5", 1), gid_v6("2001:db8::5", 2),
                           {.roce_version = 0},      {.roce_version = 0}};
  ib_gid_prefs_t p;
  ib_gid_prefs_parse(NULL, NULL, 2, &p);
  ck_assert_int_eq(ib_gid_select(tab, 8, &p), 3); /* IPv4, RoCE v2 */
  ib_gid_prefs_parse(NULL, NULL, 1, &p);
  ck_assert_int_eq(ib_gid_select(tab, 8, &p), 2); /* NCCL_IB_ROCE_VERSION_NUM=1 */
  ib_gid_prefs_parse("AF_INET6", NULL, 2, &p);
  ck_assert_int_eq(ib_gid_select(tab, 8, &p), 5); /* global IPv6 beats link-local */
  ib_gid_prefs_parse(NULL, "10.1.0.0/16", 2, &p);
  ck_assert_int_eq(ib_gid_select(tab, 8, &p), 3);
  /* No address in the range: every entry loses the family bonus; then global beats link-local and
   * v2 beats v1, which leaves IPv4 v2 (3) and IPv6 v2 (5) tied: the lower index wins. */
  ib_gid_prefs_parse(NULL, "192.168.0.0/16", 2, &p);
  ck_assert_int_eq(ib_gid_select(tab, 8, &p), 3);
}
END_TEST

START_TEST(gid_loopback_link_local_and_empty) {
  /* rxe on lo: ::ffff:127.0.0.1 as v1 and v2 */
  ib_gid_entry_t lo[3] = {gid_v4("127.0.0.1", 1), gid_v4("127.0.0.1", 2), {.roce_version = 0}};
  ib_gid_prefs_t p;
  ib_gid_prefs_parse(NULL, NULL, 2, &p);
  ck_assert_int_eq(ib_gid_select(lo, 3, &p), 1);
  /* only link-local (a veth without addresses): the RoCE v2 one, rather than nothing */
  ib_gid_entry_t ll[2] = {gid_v6("fe80::a8bb:ccff:fedd:eeff", 1),
                          gid_v6("fe80::a8bb:ccff:fedd:eeff", 2)};
  ck_assert_int_eq(ib_gid_select(ll, 2, &p), 1);
  /* unset entries: zero, and a bare fe80:: prefix */
  ib_gid_entry_t none[2] = {{.roce_version = 2}, gid_v6("fe80::", 2)};
  ck_assert_int_eq(ib_gid_select(none, 2, &p), -1);
  ck_assert_int_eq(ib_gid_select(none, 0, &p), -1);
}
END_TEST

START_TEST(gid_prefs_reject_bad_values) {
  ib_gid_prefs_t p;
  ib_gid_prefs_parse("AF_UNIX", "10.0.0.0/33", 2, &p);
  ck_assert_int_eq(p.family, AF_INET);
  ck_assert_int_eq(p.range_bits, 0);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_IB_ADDR_RANGE"));
  ib_gid_prefs_parse(NULL, "not-an-address/8", 2, &p);
  ck_assert_int_eq(p.range_bits, 0);
  ib_gid_prefs_parse("AF_INET6", "2001:db8::/32", 2, &p);
  ck_assert_int_eq(p.family, AF_INET6);
  ck_assert_int_eq(p.range_bits, 32);
  char text[64];
  ib_gid_entry_t e = gid_v4("192.0.2.7", 2);
  ck_assert_str_eq(ib_gid_format(e.raw, text, sizeof(text)), "::ffff:192.0.2.7");
  ck_assert_int_eq(ib_gid_family(e.raw), AF_INET);
  ck_assert(!ib_gid_is_link_local(e.raw));
}
END_TEST

/* ---- Striping, speed, merging
 * -------------------------------------------------------------------- */
START_TEST(stripes_cover_the_message_once) {
  size_t off, len;
  ib_stripe(1000, 4, 0, &off, &len); /* ceil(1000/4) = 250 -> 256 */
  ck_assert_uint_eq(off, 0);
  ck_assert_uint_eq(len, 256);
  ib_stripe(1000, 4, 3, &off, &len);
  ck_assert_uint_eq(off, 768);
  ck_assert_uint_eq(len, 232);
  ib_stripe(100, 4, 1, &off, &len); /* one stripe holds it all */
  ck_assert_uint_eq(len, 0);
  ck_assert_uint_eq(off, 100);
  ib_stripe(0, 3, 0, &off, &len);
  ck_assert_uint_eq(len, 0);
  for (size_t size = 0; size < 5000; size += 37) {
    for (int n = 1; n <= 8; n++) {
      size_t covered = 0, next = 0;
      for (int k = 0; k < n; k++) {
        ib_stripe(size, n, k, &off, &len);
        if (len > 0) {
          ck_assert_uint_eq(off, next); /* in order, no gap, no overlap */
          ck_assert_uint_eq(off % IB_STRIPE_ALIGN, 0);
          next = off + len;
        }
        covered += len;
      }
      ck_assert_uint_eq(covered, size);
    }
  }
}
END_TEST

START_TEST(port_speeds) {
  ck_assert_int_eq(ib_port_speed_mbps(1, 0, 1), 2500);      /* SDR 1x */
  ck_assert_int_eq(ib_port_speed_mbps(32, 0, 2), 100000);   /* EDR 4x */
  ck_assert_int_eq(ib_port_speed_mbps(64, 0, 2), 200000);   /* HDR 4x */
  ck_assert_int_eq(ib_port_speed_mbps(128, 0, 2), 400000);  /* NDR 4x */
  ck_assert_int_eq(ib_port_speed_mbps(128, 0, 16), 200000); /* NDR 2x */
  ck_assert_int_eq(ib_port_speed_mbps(0, 1, 2), 10000);     /* speed_ex bit 0 -> first rate */
}
END_TEST

START_TEST(ports_of_one_card_merge) {
  const char* paths[6] = {"/sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.0",
                          "/sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.1",
                          "/sys/devices/pci0000:00/0000:00:03.0/0000:5e:00.0",
                          NULL,
                          "/sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.0",
                          "/sys/devices/pci0000:00/0000:00:03.0/0000:5e:00.1"};
  int g[6];
  ck_assert_int_eq(ib_merge_groups(paths, 6, true, 4, g), 3);
  ck_assert_int_eq(g[0], 0);
  ck_assert_int_eq(g[1], 0);
  ck_assert_int_eq(g[2], 1);
  ck_assert_int_eq(g[3], 2); /* virtual: alone */
  ck_assert_int_eq(g[4], 0);
  ck_assert_int_eq(g[5], 1);
  ck_assert_int_eq(ib_merge_groups(paths, 6, false, 4, g), 6);
  ck_assert_int_eq(ib_merge_groups(paths, 6, true, 2, g), 4); /* at most 2 per group */
  ck_assert_int_eq(g[4], 3);
}
END_TEST

int main(void) {
  Suite* s = suite_create("net_ib");
  TCase* tc = tcase_create("net_ib");
  tcase_add_test(tc, hca_unset_or_empty_matches_everything);
  tcase_add_test(tc, hca_prefixes_ports_exact_and_exclude);
  tcase_add_test(tc, hca_odd_input);
  tcase_add_test(tc, gid_typical_roce_table);
  tcase_add_test(tc, gid_loopback_link_local_and_empty);
  tcase_add_test(tc, gid_prefs_reject_bad_values);
  tcase_add_test(tc, stripes_cover_the_message_once);
  tcase_add_test(tc, port_speeds);
  tcase_add_test(tc, ports_of_one_card_merge);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
