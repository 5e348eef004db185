/* ncclCollConfig_t.algSelection's parser (src/collectives/select.c): each expression's pairs are
 * written out here as bits algo * PROTO_COUNT + proto from the rules (stock's operators; a name
 * selects the names it equals, else those it begins), never computed by the parser. */
#include <check.h>

#include "collectives/collectives.h"
#include "unit.h"

#define B(a, p) (1u << ((a)*PROTO_COUNT + (p)))
#define RING (B(ALGO_RING, PROTO_LL) | B(ALGO_RING, PROTO_LL128) | B(ALGO_RING, PROTO_SIMPLE))
#define TREE (B(ALGO_TREE, PROTO_LL) | B(ALGO_TREE, PROTO_LL128) | B(ALGO_TREE, PROTO_SIMPLE))
#define ONESHOT \
  (B(ALGO_ONESHOT, PROTO_LL) | B(ALGO_ONESHOT, PROTO_LL128) | B(ALGO_ONESHOT, PROTO_SIMPLE))
#define TWOSHOT \
  (B(ALGO_TWOSHOT, PROTO_LL) | B(ALGO_TWOSHOT, PROTO_LL128) | B(ALGO_TWOSHOT, PROTO_SIMPLE))
#define ALL (RING | TREE | ONESHOT | TWOSHOT)

static void expect(const char* expr, unsigned want) {
  uint16_t got = 0xffff;
  char bad[64] = "";
  ck_assert_msg(coll_select_parse(expr, &got, bad, sizeof(bad)), "\"%s\" refused at \"%s\"", expr,
                bad);
  ck_assert_msg(got == want, "\"%s\": pairs 0x%x, expected 0x%x", expr, got, want);
}

static void expect_bad(const char* expr, const char* name) {
  uint16_t got = 0x1234;
  char bad[64] = "";
  ck_assert_msg(!coll_select_parse(expr, &got, bad, sizeof(bad)), "\"%s\" accepted", expr);
  ck_assert_str_eq(bad, name);
  ck_assert_int_eq(got, 0x1234); /* untouched */
}

START_TEST(test_names_and_prefixes) {
  expect("ring", RING);
  expect("RING", RING);
  expect("Tree", TREE);
  expect("r", RING);                             /* a prefix of Ring_* only */
  expect("ring_ll", B(ALGO_RING, PROTO_LL));     /* exact name wins */
  expect("RING_LL1", B(ALGO_RING, PROTO_LL128)); /* prefix of RING_LL128 only */
  expect("ring_simple", B(ALGO_RING, PROTO_SIMPLE));
  expect("oneshot", ONESHOT);
  expect("TwoShot_LL", B(ALGO_TWOSHOT, PROTO_LL));
  expect("  tree_simple\t", B(ALGO_TREE, PROTO_SIMPLE));
  expect("^ ring", ALL & ~RING); /* blanks between '^' and its name too */
  expect("ring + ^\tring_ll", B(ALGO_RING, PROTO_LL128) | B(ALGO_RING, PROTO_SIMPLE));
}
END_TEST

START_TEST(test_operators) {
  expect("tree,ring", TREE | RING);
  expect("ring + ^RING_LL128", B(ALGO_RING, PROTO_LL) | B(ALGO_RING, PROTO_SIMPLE));
  expect("^ring", ALL & ~RING);
  expect("^ring + ^tree", ONESHOT | TWOSHOT);
  expect("ring+tree", 0);
  expect("tree_ll,ring+^ring_simple,oneshot_simple",
         B(ALGO_TREE, PROTO_LL) | B(ALGO_RING, PROTO_LL) | B(ALGO_RING, PROTO_LL128) |
             B(ALGO_ONESHOT, PROTO_SIMPLE));
}
END_TEST

START_TEST(test_stock_only_names) {
  /* Known to stock, not built here: valid, and they select none of Baton's pairs. */
  expect("NVLS", 0);
  expect("nvls_simple,collnet", 0);
  expect("symk", 0);
  expect("PAT_SIMPLE,ring_ll", B(ALGO_RING, PROTO_LL));
  expect("^symk", ALL);
  expect("SYMK_RailA2A_LsaLDMC", 0);
}
END_TEST

START_TEST(test_invalid) {
  expect_bad("bogus", "bogus");
  expect_bad("ring,bogus", "bogus");
  expect_bad("ring,", "");
  expect_bad("ring+", "");
  expect_bad("^", "");
  expect_bad("ring_ll_x", "ring_ll_x");
  expect_bad("tree,(ring)", "(ring)");
}
END_TEST

static Suite* select_suite(void) {
  Suite* s = suite_create("coll_select");
  TCase* tc = tcase_create("parse");
  tcase_add_test(tc, test_names_and_prefixes);
  tcase_add_test(tc, test_operators);
  tcase_add_test(tc, test_stock_only_names);
  tcase_add_test(tc, test_invalid);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(select_suite());
}
