/*
 * test_kiln_parse.c — the .kiln lexer, parser and printer (frontend/kiln_*.c).
 *
 * Every model file directly in tests/kiln (the snippets of the layer reference
 * that are models or expressions, and the typed-input form) must
 * parse, and its canonical print must parse back to the same print; files
 * that must fail belong in a subfolder. A set of small inputs is
 * checked against its exact canonical print, a few trees node by node (kinds,
 * values, positions), and malformed inputs against their exact
 * "file:line:col: error: message". Every parse gets an exact-size copy of its
 * text, with no NUL after it, so a read past the end shows up under ASan.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kiln_ast.h"

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

#include "harness.h"

static kiln_ctx *ctx;

/* One parse of an exact-size copy of text[0..len); the arena holds the tree. */
typedef struct parsed {
  kir_arena arena;
  kf_module *m;
  kiln_status status;
  char *copy;
} parsed;

static bool program_mode; /* parse with kf_parse_program */

static parsed parse_n(const char *text, size_t len, const char *file) {
  parsed p = {0};
  p.copy = malloc(len ? len : 1);
  if (len) memcpy(p.copy, text, len);
  p.status = program_mode ? kf_parse_program(ctx, p.copy, len, file, &p.arena, &p.m)
                          : kf_parse(ctx, p.copy, len, file, &p.arena, &p.m);
  return p;
}

static parsed parse(const char *text) { return parse_n(text, strlen(text), "t.kiln"); }

static void done(parsed *p) {
  kir_arena_free(&p->arena);
  free(p->copy);
}

static char *print_module(const kf_module *m) {
  char *s = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&s, &n);
  kf_module_print(m, f);
  fclose(f);
  return s;
}

/* Parses, prints, parses the print and prints again: the two prints agree. */
static char *round_trip(const char *text, size_t len, const char *file) {
  parsed p = parse_n(text, len, file);
  if (p.status != KILN_OK) {
    fprintf(stderr, "  %s\n", kiln_ctx_error(ctx));
    done(&p);
    return NULL;
  }
  char *s1 = print_module(p.m);
  parsed q = parse(s1);
  char *s2 = q.status == KILN_OK ? print_module(q.m) : NULL;
  if (!s2 || strcmp(s1, s2)) {
    fprintf(stderr, "  round trip of %s differs:\n%s\n---\n%s\n", file, s1,
            s2 ? s2 : kiln_ctx_error(ctx));
    free(s1);
    s1 = NULL;
  }
  free(s2);
  done(&q);
  done(&p);
  return s1;
}

/* ------------------------------------------------------- the seed files */

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0;
  *n = 0;
  for (;;) {
    if (*n == cap) {
      cap = cap ? cap * 2 : 4096;
      buf = realloc(buf, cap);
    }
    size_t got = fread(buf + *n, 1, cap - *n, f);
    if (!got) break;
    *n += got;
  }
  fclose(f);
  return buf;
}

static void test_model_files(void) {
  const char *dir = KILN_SOURCE_DIR "/tests/kiln";
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  if (!d) return;
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t k = strlen(e->d_name);
    if (k < 6 || strcmp(e->d_name + k - 5, ".kiln")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t n;
    char *text = read_file(path, &n);
    CHECK(text != NULL);
    char *s = text ? round_trip(text, n, e->d_name) : NULL;
    if (!s) fprintf(stderr, "  %s does not parse and round-trip\n", path);
    CHECK(s != NULL);
    free(s);
    free(text);
    count++;
  }
  closedir(d);
  CHECK(count >= 15);
}

/* ------------------------------------------------------ canonical prints */

static const struct {
  const char *src, *want;
} prints[] = {
    /* precedence and associativity */
    {"a + b * c - d", "((a + (b * c)) - d)\n"},
    {"a - b - c", "((a - b) - c)\n"},
    {"a ** b ** c", "(a ** (b ** c))\n"},
    {"-a ** 2", "(-(a ** 2))\n"},
    {"-2 ** 2", "(-(2 ** 2))\n"},
    {"(-2) ** 2", "((-2) ** 2)\n"},
    {"2 ** -1", "(2 ** -1)\n"},
    {"a @ b + c", "((a @ b) + c)\n"},
    {"a @ b * c // d % e / f", "(((((a @ b) * c) // d) % e) / f)\n"},
    {"not a and b or c", "(((not a) and b) or c)\n"},
    {"not a == b", "(not (a == b))\n"},
    {"a < b and c >= d or e != f", "(((a < b) and (c >= d)) or (e != f))\n"},
    {"(a < b) < c", "((a < b) < c)\n"},
    {"a - -b", "(a - (-b))\n"},
    {"- - 3", "3\n"},
    {"-x.y", "(-x.y)\n"},
    /* numbers */
    {"[1e-3, 3e-4, 1e-5, 1e16, 1.5, 10.0, 0.1, -1e9, 007, -0.0, 1E+2]",
     "[0.001, 0.0003, 1e-05, 1e+16, 1.5, 10.0, 0.1, -1000000000.0, 7, -0.0, 100.0]\n"},
    {"[9223372036854775807, -9223372036854775807]",
     "[9223372036854775807, -9223372036854775807]\n"},
    {"16 * 14 * 14", "((16 * 14) * 14)\n"},
    {"(1).x + (-1)[0] + 2.5(3)", "(((1).x + (-1)[0]) + (2.5)(3))\n"},
    /* strings, literals */
    {"[\"relu\", \"a\\\"b\\\\c\\n\\t\\r\", true, false, none, \"\"]",
     "[\"relu\", \"a\\\"b\\\\c\\n\\t\\r\", true, false, none, \"\"]\n"},
    {"\"caf\xc3\xa9 \xe2\x80\xa6\"", "\"caf\xc3\xa9 \xe2\x80\xa6\"\n"},
    /* calls, members, indexing, slices */
    {"linear(4, 32, bias=false)", "linear(4, 32, bias=false)\n"},
    {"f(\n  1,\n  k=2,\n)", "f(1, k=2)\n"},
    {"record(a=1, b=2)", "record(a=1, b=2)\n"},
    {"f()()", "f()()\n"},
    {"params[0].W", "params[0].W\n"},
    {"r.history[-1]", "r.history[-1]\n"},
    {"t[:, 0:-1, 1:, :2, ::2, 1:2:3, a + 1:]", "t[:, 0:-1, 1:, :2, ::2, 1:2:3, (a + 1):]\n"},
    {"[]", "[]\n"},
    {"[[1, 2,], [],]", "[[1, 2], []]\n"},
    /* lambdas */
    {"fn(x) => x * sigmoid(1.702 * x)", "(fn(x) => (x * sigmoid((1.702 * x))))\n"},
    {"fn() => 1", "(fn() => 1)\n"},
    {"fn(a, b) => fn(c) => a + b + c", "(fn(a, b) => (fn(c) => ((a + b) + c)))\n"},
    {"(fn(x) => x)(3)", "(fn(x) => x)(3)\n"},
    {"f(fn(s) => cosine_lr(s, 1000, base=3e-4, warmup=100), clip=1.0)",
     "f((fn(s) => cosine_lr(s, 1000, base=0.0003, warmup=100)), clip=1.0)\n"},
    /* statements */
    {"use layers\nuse nn\ninput x: f32[N, 4]\ninput tokens: i64[B, T]\ninput g: graph\n"
     "input s: f64\ninput e: bool[]\ninput z: u8[0, 1099511627776]\nlet y = x\ny",
     "use layers\nuse nn\ninput x: f32[N, 4]\ninput tokens: i64[B, T]\ninput g: graph\n"
     "input s: f64[]\ninput e: bool[]\ninput z: u8[0, 1099511627776]\nlet y = x\ny\n"},
    {"\n\n  # comment only\n\nlet a = 1 # trailing\n\n\n  a  \n\n# end", "let a = 1\na\n"},
    {"\xef\xbb\xbflet a = 1\r\na\r\n", "let a = 1\na\n"},
    {"input(x)", "input(x)\n"},
    {"let use = 1\nuse", "let use = 1\nuse\n"},
    {"input\n", "input\n"},
};

static void test_prints(void) {
  for (size_t i = 0; i < sizeof prints / sizeof prints[0]; i++) {
    char *s = round_trip(prints[i].src, strlen(prints[i].src), "t.kiln");
    if (!s || strcmp(s, prints[i].want)) {
      fprintf(stderr, "  print of case %zu:\n%s  got:\n%s  want:\n%s", i, prints[i].src,
              s ? s : "(no parse)\n", prints[i].want);
      failures++;
    }
    free(s);
  }
}

/* ------------------------------------------------------------- the tree */

static void test_tree(void) {
  parsed p = parse("use layers\ninput x: f32[N, 4]\n"
                   "let y = linear(4, 32,\n   bias=false)(x) + -1\n"
                   "fn(a) => a.b[0:2]\n");
  CHECK(p.status == KILN_OK);
  if (p.status != KILN_OK) {
    done(&p);
    return;
  }
  const kf_module *m = p.m;
  CHECK(!strcmp(m->file, "t.kiln") && m->nstmts == 3);
  CHECK(m->stmts[0].kind == KF_STMT_USE && !strcmp(m->stmts[0].name, "layers"));
  const kf_stmt *in = &m->stmts[1];
  CHECK(in->kind == KF_STMT_INPUT && !strcmp(in->name, "x") && in->line == 2 && in->col == 1);
  CHECK(in->name_line == 2 && in->name_col == 7);
  CHECK(!in->type.is_graph && in->type.dtype == KILN_F32 && in->type.rank == 2);
  CHECK(!strcmp(in->type.dims[0].sym, "N") && in->type.dims[0].col == 14);
  CHECK(!in->type.dims[1].sym && in->type.dims[1].n == 4 && in->type.dims[1].col == 17);

  const kf_node *add = m->stmts[2].value;
  CHECK(add->kind == KF_BINARY && add->binary.op == KF_OP_ADD);
  CHECK(add->line == 4 && add->col == 19 && !strcmp(add->file, "t.kiln"));
  const kf_node *neg = add->binary.b;
  CHECK(neg->kind == KF_INT && neg->i == -1 && neg->line == 4 && neg->col == 21);
  const kf_node *outer = add->binary.a; /* linear(...)(x) */
  CHECK(outer->kind == KF_CALL && outer->line == 3 && outer->col == 9 && outer->call.nargs == 1);
  const kf_node *lin = outer->call.callee;
  CHECK(lin->kind == KF_CALL && lin->call.nargs == 3 && lin->line == 3 && lin->col == 9);
  CHECK(!lin->call.args[0].name && lin->call.args[0].value->i == 4);
  CHECK(!strcmp(lin->call.args[2].name, "bias") && lin->call.args[2].line == 4 &&
        lin->call.args[2].col == 4);
  CHECK(lin->call.args[2].value->kind == KF_BOOL && !lin->call.args[2].value->b);
  CHECK(lin->call.callee->kind == KF_NAME && !strcmp(lin->call.callee->name, "linear"));
  CHECK(add->height == 4);

  const kf_node *lam = m->model;
  CHECK(lam->kind == KF_LAMBDA && lam->line == 5 && lam->col == 1 && lam->lambda.nparams == 1);
  const kf_node *idx = lam->lambda.body;
  CHECK(idx->kind == KF_INDEX && idx->col == 13 && idx->index.n == 1);
  CHECK(idx->index.obj->kind == KF_MEMBER && idx->index.obj->col == 12);
  const kf_node *sl = idx->index.items[0];
  CHECK(sl->kind == KF_SLICE && sl->col == 14 && sl->slice.lo->i == 0 && sl->slice.hi->i == 2);
  CHECK(!sl->slice.step);
  done(&p);

  /* NULL file name; strings decoded. */
  const char *src = "\"a\\tb\"";
  p = parse_n(src, strlen(src), NULL);
  CHECK(p.status == KILN_OK && !strcmp(p.m->file, "<input>") && !strcmp(p.m->model->str, "a\tb"));
  done(&p);
}

/* ----------------------------------------------------------- the errors */

static const struct {
  const char *src, *msg;
} errors[] = {
    {"let a = \"relu\nx", "t.kiln:1:9: error: unterminated string (a string ends on the line where "
                          "it starts)"},
    {"\"abc\r\n", "t.kiln:1:1: error: unterminated string (a string ends on the line where it "
                  "starts)"},
    {"let a = linear(4, 32\n", "t.kiln:2:1: error: expected ')' to close the call opened at 1:15, "
                               "got the end of the file"},
    {"let a = f(1, 2\nlet b = 3\nb", "t.kiln:2:1: error: expected ')' to close the call opened at "
                                     "1:10, got 'let'"},
    {"f(a b)", "t.kiln:1:5: error: expected ',' or ')' in the call opened at 1:2, got 'b'"},
    {"f(1:2)", "t.kiln:1:4: error: expected ',' or ')' in the call opened at 1:2, got ':' (a slice "
               "a:b is written only inside [])"},
    {"[1, 2", "t.kiln:1:6: error: expected ']' to close the list opened at 1:1, got the end of the "
              "file"},
    {"x[0", "t.kiln:1:4: error: expected ']' to close the index opened at 1:2, got the end of the "
            "file"},
    {"f(a]", "t.kiln:1:4: error: expected ')' to close the call opened at 1:2, got ']'"},
    {"(a, b)", "t.kiln:1:3: error: expected ')' to close the '(' opened at 1:1, got ',' (Kiln has "
               "no tuples: write a list [a, b])"},
    {"let a = b = c\na", "t.kiln:1:11: error: '=' in an expression: did you mean '=='?"},
    {"f(a.b = 1)", "t.kiln:1:7: error: '=' in an expression: did you mean '=='?"},
    {"x = 3", "t.kiln:1:6: error: no model expression: a .kiln file ends with the expression that "
              "is the model"},
    {"const p = model.init(seed=0)\np", "t.kiln:1:1: error: unknown statement 'const': a name is "
                                        "bound with 'let NAME = ...' or 'var NAME = ...'"},
    {"p.x = 1", "t.kiln:1:5: error: only a name can be assigned: values are immutable (make a new "
                "record or list instead)"},
    {"for i in 0..4\n  i", "t.kiln:1:14: error: expected ':' to open the block, got the end of the "
                           "line (e.g. for x in xs:)"},
    {"fn f(x):\nreturn x\nf", "t.kiln:2:1: error: expected an indented block after the 'fn' at "
                              "1:1 (indent its statements deeper than the line that opens it)"},
    {"fn f(x):\n  let a = x\n    return a\nf", "t.kiln:3:5: error: unexpected indent (this "
                                               "block's statements start in column 3)"},
    {"return 1", "t.kiln:1:1: error: 'return' outside a function (fn name(...): ...)"},
    {"else:\n  1", "t.kiln:1:1: error: 'else' without an 'if' at the same indentation"},
    {"[x for 1 in xs]", "t.kiln:1:8: error: expected a name after 'for', got '1'"},
    {"[x for y xs]", "t.kiln:1:10: error: expected 'in' after the name of a 'for', got 'xs' ([x * 2 "
                     "for x in xs])"},
    {"0..1..2", "t.kiln:1:5: error: ranges do not chain"},
    {"0.", "t.kiln:1:1: error: malformed number '0.': write 0.0"},
    /* the first error in the file is reported, whether the lexer or the parser finds it */
    {"let a = 1 1\nlet b = 0.\nb", "t.kiln:1:11: error: expected the end of the line after the "
                                   "expression, got '1'"},
    {"let a = 1\nlet b = 0. + c d\nb", "t.kiln:2:9: error: malformed number '0.': write 0.0"},
    {"fn f(p):\n    return p\nfor i in 0..4:\n    let x = 1 1\nlet y = 2 $\n",
     "t.kiln:4:15: error: expected the end of the line after the expression, got '1'"},
    {"input x: f31[N]\nx", "t.kiln:1:10: error: unknown type 'f31' (the types are f64, f32, f16, "
                           "bf16, i64, i32, i8, u8, bool, i16, u16, u32 and graph)"},
    {"input x: 3\nx", "t.kiln:1:10: error: expected a type after ':', got '3' (e.g. f32[N, 4] or "
                      "graph)"},
    {"input x f32[N]\nx", "t.kiln:1:9: error: expected ':' after 'input x', got 'f32' (e.g. input "
                          "x: f32[N, 4])"},
    {"input g: graph[N]\ng", "t.kiln:1:15: error: the type 'graph' has no dims"},
    {"input x: f32[1, 2, 3, 4, 5, 6, 7, 8, 9]\nx", "t.kiln:1:38: error: a type has at most 8 dims"},
    {"input x: f32[N, 2.5]\nx", "t.kiln:1:17: error: dim 2.5 is not an integer"},
    {"input x: f32[-1]\nx", "t.kiln:1:14: error: negative dim -1: a dim is a size (0 or more) or a "
                            "symbol like N"},
    {"input x: f32[1099511627777]\nx", "t.kiln:1:14: error: dim 1099511627777 is too large (the "
                                       "limit is 2^40)"},
    {"input x: f32[N, 4\nx",
     "t.kiln:2:1: error: expected ']' to close the dims opened at 1:13, got "
     "'x'"},
    {"input x: f32[N]\ninput x: f64[N]\nx", "t.kiln:2:7: error: 'x' is already defined at 1:7 (a "
                                            "name is bound once)"},
    {"input x: f32[N]\nlet x = 1\nx", "t.kiln:2:5: error: 'x' is already defined at 1:7 (a name is "
                                      "bound once)"},
    {"f(bias=1, bias=2)", "t.kiln:1:11: error: keyword argument 'bias' is repeated (first given at "
                          "1:3)"},
    {"linear(4, bias=false, 32)", "t.kiln:1:23: error: positional argument after keyword argument "
                                  "'bias' (positional arguments come first)"},
    {"f(fn=1)", "t.kiln:1:3: error: 'fn' is a reserved word and cannot name a keyword argument"},
    {"let a = 1\n", "t.kiln:1:1: error: no model expression after the last 'let': end the file "
                    "with the model, e.g. 'a' on a line of its own"},
    {"", "t.kiln:1:1: error: no model expression: a .kiln file ends with the expression that is "
         "the model"},
    {"use layers\n# nothing else\n", "t.kiln:3:1: error: no model expression: a .kiln file ends "
                                     "with the expression that is the model"},
    {"a\nlet b = 1\nb", "t.kiln:1:1: error: only the last statement may be a bare expression (it "
                        "is the model); bind this one with 'let NAME = ...'"},
    {"let x 3\nx", "t.kiln:1:7: error: expected '=' after 'let x', got '3'"},
    {"let x == 3\nx", "t.kiln:1:7: error: expected '=' after 'let x', got '=='"},
    {"var l, grads = f(x)\nl", "t.kiln:1:6: error: expected '=' after 'var l', got ',' (a 'var' "
                               "binds one name)"},
    {"let 3 = 4\n3", "t.kiln:1:5: error: expected a name after 'let', got '3'"},
    {"let fn = 3\n1", "t.kiln:1:5: error: 'fn' is a reserved word and cannot be a name"},
    {"fn(a, a) => a", "t.kiln:1:7: error: parameter 'a' is repeated (first at 1:4)"},
    {"fn(x, 1) => x", "t.kiln:1:7: error: expected a parameter name, got '1'"},
    {"fn(x) x", "t.kiln:1:7: error: expected '=>' after the parameters of 'fn', got 'x' (a lambda "
                "is written fn(x) => expr)"},
    {"fn x => x", "t.kiln:1:6: error: expected '(' after the function's name, got '=>' (fn name(p, "
                  "x): ...)"},
    {"fn model(p, x) = net(p)", "t.kiln:1:24: error: no model expression: a .kiln file ends with "
                                "the expression that is the model"},
    {"let m = fn model(p, x) => p\nm", "t.kiln:1:9: error: 'fn model(...)' is not Kiln syntax: "
                                       "write let model = fn(...) => expr"},
    {"1 + fn(x) => x", "t.kiln:1:5: error: a lambda inside an operation must be in parentheses: "
                       "(fn(x) => ...)"},
    {"a < b < c", "t.kiln:1:7: error: comparisons do not chain: write (a < b) and (b < c)"},
    {"let a = b +\nc", "t.kiln:1:12: error: expected an expression after '+', got the end of the "
                       "line (to continue an expression on the next line, wrap it in parentheses)"},
    {"let a = -", "t.kiln:1:10: error: expected an expression after '-', got the end of the file"},
    {"let a = b)\na", "t.kiln:1:10: error: unmatched ')'"},
    {"a b", "t.kiln:1:3: error: expected the end of the line after the expression, got 'b'"},
    {"use torch\n1",
     "t.kiln:1:5: error: unknown library 'torch' (a .kiln file may use 'layers' and "
     "'nn')"},
    {"x.1", "t.kiln:1:3: error: expected a field name after '.', got '1'"},
    {"x[]", "t.kiln:1:3: error: expected an index inside '[]'"},
    {"()", "t.kiln:1:2: error: expected an expression inside '()'"},
    {"f(1,,2)", "t.kiln:1:5: error: expected an expression after ',', got ','"},
    {"99999999999999999999", "t.kiln:1:1: error: integer '99999999999999999999' is too large (the "
                             "limit is 9223372036854775807)"},
    {"-9223372036854775808", "t.kiln:1:2: error: integer '9223372036854775808' is too large (the "
                             "limit is 9223372036854775807)"},
    {"1e999", "t.kiln:1:1: error: number '1e999' is too large for a float (the limit is about "
              "1.8e308)"},
    {"12abc", "t.kiln:1:1: error: malformed number '12abc'"},
    {"1.2.3", "t.kiln:1:1: error: malformed number '1.2.3'"},
    {"let a = 1.\na", "t.kiln:1:9: error: malformed number '1.': write 1.0"},
    {"1.e5", "t.kiln:1:1: error: malformed number '1.e5': write 1.0e5"},
    {"\"\\q\"", "t.kiln:1:2: error: unknown escape '\\q' in a string (the escapes are \\n \\t \\r "
                "\\\\ \\\")"},
    {"\"a\x01\"", "t.kiln:1:3: error: control character 0x01 in a string (write \\n or \\t)"},
    {"a && b", "t.kiln:1:3: error: unexpected character '&': write 'and'"},
    {"a ! b", "t.kiln:1:3: error: unexpected character '!': write 'not x' to negate, '!=' to "
              "compare"},
    {"'relu'", "t.kiln:1:1: error: unexpected character \"'\": strings are written in double "
               "quotes"},
    {"record{a=1}", "t.kiln:1:7: error: unexpected character '{': records are written record(a=1, "
                    "b=2)"},
    {"transformer_block(d, heads=4, ff=4\xc2\xb7"
     "d)",
     "t.kiln:1:35: error: unexpected character U+00B7 '\xc2\xb7': did you mean '*'?"},
    {"f(x, \xe2\x80\xa6)", "t.kiln:1:6: error: unexpected character U+2026 '\xe2\x80\xa6': write "
                           "the arguments out in full"},
    {"\"\xc3\xa9\" + \xc3\xa9",
     "t.kiln:1:7: error: unexpected character U+00E9 '\xc3\xa9': outside "
     "strings and comments a .kiln file is ASCII"},
    {"a + \xff", "t.kiln:1:5: error: invalid UTF-8 byte 0xff (a .kiln file is UTF-8 text)"},
    {"a\x01", "t.kiln:1:2: error: unexpected control character 0x01"},
    {"(a b)", "t.kiln:1:4: error: expected ')' to close the '(' opened at 1:1, got 'b'"},
    {"fn(a b) => a", "t.kiln:1:6: error: expected ',' or ')' in the parameter list opened at 1:3, "
                     "got 'b'"},
    {"input x: f32[,]\nx", "t.kiln:1:14: error: expected a dim (a size like 4 or a symbol like N), "
                           "got ','"},
    {"a $ b", "t.kiln:1:3: error: unexpected character '$'"},
    {"a; b", "t.kiln:1:2: error: unexpected character ';': write one statement per line"},
    {"activation(\xe2\x80\x9crelu\xe2\x80\x9d)",
     "t.kiln:1:12: error: unexpected character U+201C '\xe2\x80\x9c': strings are written in plain "
     "double quotes"},
    {"\"a\\\x01\"", "t.kiln:1:3: error: unknown escape in a string: '\\' before byte 0x01"},
};

static void test_errors(void) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
    parsed p = parse(errors[i].src);
    const char *got = kiln_ctx_error(ctx);
    if (p.status != KILN_ERR_PARSE || p.m || strcmp(got, errors[i].msg)) {
      fprintf(stderr, "  error case %zu:\n    %s\n  got:  %s\n  want: %s\n", i, errors[i].src,
              p.status == KILN_OK ? "(parsed)" : got, errors[i].msg);
      failures++;
    }
    done(&p);
  }
}

/* ------------------------------------------------------- depth, bounds */

static char *repeat3(const char *a, int n, const char *mid, const char *b, int m) {
  size_t la = strlen(a), lb = strlen(b), lm = strlen(mid);
  char *s = malloc(la * (size_t)n + lm + lb * (size_t)m + 1), *o = s;
  for (int i = 0; i < n; i++, o += la)
    memcpy(o, a, la);
  memcpy(o, mid, lm);
  o += lm;
  for (int i = 0; i < m; i++, o += lb)
    memcpy(o, b, lb);
  *o = 0;
  return s;
}

/* Parses, and so does the canonical print, which nests deeper than the source. */
static bool parses(const char *s) {
  char *printed = round_trip(s, strlen(s), "t.kiln");
  free(printed);
  return printed != NULL;
}

static bool too_deep(const char *s) {
  parsed p = parse(s);
  bool ok = p.status == KILN_ERR_PARSE && strstr(kiln_ctx_error(ctx), "nested too deeply (more "
                                                                      "than 200 levels)");
  done(&p);
  return ok;
}

static void test_depth(void) {
  struct {
    const char *open, *mid, *close;
    int ok; /* the most repetitions that still parse */
  } forms[] = {
      {"(", "x", ")", 407}, /* parentheses alone: only the recursion guard */
      {"[", "", "]", 200},  /* 200 empty lists: the innermost is a leaf */
      {"f(", "x", ")", 199},
      {"-", "x", "", 199},
      {"not ", "x", "", 199},
      {"x[", "0", "]", 199},
      {"fn(a) => ", "a", "", 199},
      {"", "x", " + x", 199}, /* a left-leaning chain, built in a loop */
      {"", "x", " ** x", 199},
      {"", "x", ".a", 199},
      {"", "x", "(1)", 199},
  };
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    bool left = forms[i].close[0] && forms[i].open[0] == 0;
    int n = forms[i].ok;
    char *ok = left ? repeat3("", 0, forms[i].mid, forms[i].close, n)
                    : repeat3(forms[i].open, n, forms[i].mid, forms[i].close, n);
    char *bad = left ? repeat3("", 0, forms[i].mid, forms[i].close, n + 1)
                     : repeat3(forms[i].open, n + 1, forms[i].mid, forms[i].close, n + 1);
    if (!parses(ok) || !too_deep(bad)) {
      fprintf(stderr, "  depth form %zu: %s\n", i, kiln_ctx_error(ctx));
      failures++;
    }
    free(ok);
    free(bad);
  }
  /* A deep file far past the limit fails fast, without recursing into it. */
  char *huge = repeat3("(", 100000, "x", ")", 100000);
  CHECK(too_deep(huge));
  free(huge);
  huge = repeat3("", 0, "x", "+x", 100000);
  CHECK(too_deep(huge));
  free(huge);
  /* Wide is fine: a list of 100000 items is two levels. */
  huge = repeat3("[", 1, "", "1,", 100000);
  size_t k = strlen(huge);
  huge[k - 1] = ']';
  CHECK(parses(huge));
  free(huge);
}

static void test_bounds(void) {
  /* The length is the end: nothing after it is read, and a token cut by the
   * end is cut, not continued. */
  parsed p = parse_n("abcdef", 2, "t.kiln");
  CHECK(p.status == KILN_OK && p.m->model->kind == KF_NAME && !strcmp(p.m->model->name, "ab"));
  done(&p);
  p = parse_n("\"abc\"", 4, "t.kiln");
  CHECK(p.status == KILN_ERR_PARSE &&
        strstr(kiln_ctx_error(ctx), "1:1: error: unterminated string"));
  done(&p);
  p = parse_n("1.5e10", 3, "t.kiln");
  CHECK(p.status == KILN_OK && p.m->model->kind == KF_FLOAT && p.m->model->f == 1.5);
  done(&p);
  p = parse_n("1.5e10", 4, "t.kiln");
  CHECK(p.status == KILN_ERR_PARSE && strstr(kiln_ctx_error(ctx), "malformed number '1.5e'"));
  done(&p);
  p = parse_n("x # comment", 5, "t.kiln");
  CHECK(p.status == KILN_OK);
  done(&p);
  p = parse_n("1.", 2, "t.kiln");
  CHECK(p.status == KILN_ERR_PARSE);
  done(&p);
  /* A NUL inside the text is a character like any other. */
  p = parse_n("a\0b", 3, "t.kiln");
  CHECK(p.status == KILN_ERR_PARSE &&
        !strcmp(kiln_ctx_error(ctx), "t.kiln:1:2: error: unexpected control character 0x00"));
  done(&p);
  /* A long token is cut in a message, never inside a UTF-8 character. */
  char src[80] = "a \"", want[160];
  for (int i = 0; i < 25; i++)
    strcat(src, "\xc3\xa9");
  strcat(src, "\"");
  snprintf(want, sizeof want,
           "t.kiln:1:3: error: expected the end of the line after the "
           "expression, got '%.39s...'",
           src + 2);
  p = parse(src);
  CHECK(p.status == KILN_ERR_PARSE && !strcmp(kiln_ctx_error(ctx), want));
  done(&p);
  /* Bad arguments are rejected, not dereferenced. */
  kir_arena a = {0};
  kf_module *m = (kf_module *)&a;
  CHECK(kf_parse(ctx, NULL, 3, "t.kiln", &a, &m) == KILN_ERR_INVALID && m == NULL);
  CHECK(kf_parse(ctx, "x", 1, "t.kiln", NULL, &m) == KILN_ERR_INVALID);
  CHECK(kf_parse(ctx, NULL, 0, "t.kiln", &a, &m) == KILN_ERR_PARSE);
  kir_arena_free(&a);
}

/* Programs (tests/seed) print and parse back to the same tree; one canonical form exactly. */
static void test_programs(void) {
  program_mode = true;
  const char *files[] = {"001_s2_gated_blocks.kiln", "002_s1_contract.kiln", "grad_fd.kiln",
                         "language.kiln"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/seed/%s", KILN_SOURCE_DIR, files[i]);
    size_t n;
    char *text = read_file(path, &n);
    CHECK(text != NULL);
    char *printed = text ? round_trip(text, n, files[i]) : NULL;
    CHECK(printed != NULL);
    free(printed);
    free(text);
  }
  const char *src = "fn f(p, x):\n    var h = x\n    for i in 0..n:\n        if i > 1:\n"
                    "            h = h + 1\n        elif i == 0:\n            h = h - 1\n"
                    "    return [h for _ in xs]\nlet a, b = f(1, 2)\nprint(x[..., -1])\n";
  const char *want = "fn f(p, x):\n  var h = x\n  for i in (0 .. n):\n    if (i > 1):\n"
                     "      h = (h + 1)\n    else:\n      if (i == 0):\n        h = (h - 1)\n"
                     "  return [h for _ in xs]\nlet a, b = f(1, 2)\nprint(x[..., -1])\n";
  char *got = round_trip(src, strlen(src), "t.kiln");
  CHECK(got && !strcmp(got, want));
  if (got && strcmp(got, want)) fprintf(stderr, "  got:\n%s\n  want:\n%s\n", got, want);
  free(got);
  program_mode = false;
}

int main(void) {
  ctx = kiln_ctx_create();
  test_programs();
  test_model_files();
  test_prints();
  test_tree();
  test_errors();
  test_depth();
  test_bounds();
  kiln_ctx_destroy(ctx);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_kiln_parse: all passed\n");
  return 0;
}
