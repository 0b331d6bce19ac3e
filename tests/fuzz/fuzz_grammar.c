/*
 * fuzz_grammar.c: libFuzzer target for the GBNF grammar compiler and the recognizer that holds
 * generations to a grammar (src/engine/grammar.h).
 *
 * An input is a grammar, a line "\n---\n" and a text (without the line: the grammar alone).
 * The grammar must compile or be refused with GRAFT_EINVAL and a message that starts
 * "grammar:"; the text is then fed to the recognizer in pieces of 1 to 4 bytes until one is
 * refused, which must leave the run where it stood, and a step-by-step probe of each piece
 * must answer as the feed did. The stacks and nodes stay within their bounds. ASan and UBSan
 * do the rest. Seeds live in tests/fuzz/seeds/fuzz_grammar/.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static void require(int ok)
{
    if (!ok)
        abort();
}

/* Whether piece[0, n) can follow the run's text, stepped without committing. */
static bool probe(graft__grammar_run *run, const uint8_t *piece, size_t n)
{
    uint32_t n_nodes = run->n_nodes, n_sets = run->n_sets;
    graft__grammar_at at = run->at;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = graft__grammar_step(run, &at, piece[i], &at);
    run->n_nodes = n_nodes, run->n_sets = n_sets;
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memmem(data, size, "\n---\n", 5);
    size_t grammar_len = sep != NULL ? (size_t)(sep - data) : size;
    graft__grammar *g = NULL;
    char *err = NULL;
    int rc = graft__grammar_compile((const char *)data, grammar_len, &g, &err);
    if (rc != GRAFT_OK) {
        require((rc == GRAFT_EINVAL || rc == GRAFT_ENOMEM) && g == NULL);
        require(rc == GRAFT_ENOMEM || (err != NULL && strncmp(err, "grammar:", 8) == 0));
        free(err);
        return 0;
    }
    require(err == NULL);
    graft__grammar_run *run = NULL;
    rc = graft__grammar_run_create(g, 8, &run);
    require(rc == GRAFT_OK || rc == GRAFT_ERANGE);
    const uint8_t *text = sep != NULL ? sep + 5 : data + size;
    size_t len = (size_t)(data + size - text);
    for (size_t i = 0; run != NULL && i < len;) {
        size_t n = 1 + text[i] % 4;
        n = n < len - i ? n : len - i;
        graft__grammar_at before = run->at;
        uint32_t n_nodes = run->n_nodes, n_sets = run->n_sets;
        bool fits = probe(run, text + i, n);
        bool fed = graft__grammar_run_feed(run, (const char *)(text + i), n);
        require(fits == fed || run->overflow);
        require(run->n_nodes <= GRAFT__GRAMMAR_NODES && run->at.count <= GRAFT__GRAMMAR_MAX_STACKS);
        if (!fed) {
            require(memcmp(&before, &run->at, sizeof before) == 0 && run->n_nodes == n_nodes &&
                    run->n_sets == n_sets);
            break;
        }
        require(!graft__grammar_run_complete(run, &run->at) ||
                graft__grammar_run_accepts(run, &run->at));
        i += n;
    }
    graft__grammar_run_free(run);
    graft__grammar_free(g);
    return 0;
}
