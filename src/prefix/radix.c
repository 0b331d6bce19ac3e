/*
 * radix.c: the prefix cache's index, a radix tree of token sequences (prefix.h).
 *
 * Every node but the root carries the edge label from its parent (one or more tokens) and
 * the depth at the label's end; a key that ends at a node keeps its value there. Children
 * are sorted by the first token of their labels, so a step down is a binary search. With
 * the tree compact (no valueless node with one child, no valueless leaf), it has at most
 * 2 * values + 1 nodes and a lookup walks the query once.
 *
 * Insert allocates everything it needs before changing anything, so a failed allocation
 * leaves the tree as it was. Remove never fails: it prunes valueless leaves upward and
 * merges a valueless node into its only child; that merge allocates the joined label, and
 * if it cannot, the tree simply stays less compact (still correct).
 *
 * graft__radix_match lists the values by how many leading tokens their keys share with a
 * query: walking down the query's path, the subtree where the path ends (or leaves an edge
 * midway) shares the deepest prefix; then each node up the path adds its own value and its
 * other subtrees, at that node's depth. Subtrees are walked with parent links, no stack.
 */
#include <string.h>

#include "prefix/prefix.h"

struct graft__radix_node {
    int32_t *label;             /* (len) tokens of the edge from the parent; NULL at the root */
    int32_t len;
    int32_t depth;              /* tokens from the root to the label's end: a key's length */
    graft__radix_node *parent;
    graft__radix_node **kids;   /* (cap_kids) sorted by label[0] */
    int32_t n_kids, cap_kids;
    void *value;
};

struct graft__radix {
    graft__radix_node root;
    size_t n_values, n_nodes;
};

/* ---- nodes ----------------------------------------------------------------------------------- */

/* A node with a copy of tokens[0, len) as its label and room for `cap` children; not linked. */
static graft__radix_node *node_new(const int32_t *tokens, int32_t len, int32_t depth,
                                   int32_t cap)
{
    graft__radix_node *node = graft__calloc(1, sizeof *node);
    if (node == NULL)
        return NULL;
    node->label = graft__malloc((size_t)len * sizeof *node->label);
    node->kids = cap > 0 ? graft__malloc((size_t)cap * sizeof *node->kids) : NULL;
    if (node->label == NULL || (cap > 0 && node->kids == NULL)) {
        graft__free(node->label);
        graft__free(node->kids);
        graft__free(node);
        return NULL;
    }
    memcpy(node->label, tokens, (size_t)len * sizeof *tokens);
    node->len = len;
    node->depth = depth;
    node->cap_kids = cap;
    return node;
}

static void node_free(graft__radix_node *node)
{
    graft__free(node->label);
    graft__free(node->kids);
    graft__free(node);
}

/* The child whose label starts with `token`, or NULL; *at is its index or where it would go. */
static graft__radix_node *find_kid(const graft__radix_node *node, int32_t token, int32_t *at)
{
    int32_t lo = 0, hi = node->n_kids;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int32_t first = node->kids[mid]->label[0];
        if (first == token) {
            *at = mid;
            return node->kids[mid];
        }
        if (first < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = lo;
    return NULL;
}

static int32_t kid_index(const graft__radix_node *kid)
{
    int32_t at;
    find_kid(kid->parent, kid->label[0], &at);
    return at;
}

/* Tokens shared at the start of a and b, at most n. */
static int32_t common(const int32_t *a, const int32_t *b, int32_t n)
{
    int32_t k = 0;
    while (k < n && a[k] == b[k])
        k++;
    return k;
}

/* ---- create / free --------------------------------------------------------------------------- */

int graft__radix_create(graft__radix **out)
{
    *out = graft__calloc(1, sizeof **out);
    if (*out == NULL)
        return GRAFT_ENOMEM;
    (*out)->n_nodes = 1;
    return GRAFT_OK;
}

/* The next node of a pre-order walk of the subtree under `top` (top itself first), or NULL. */
static graft__radix_node *walk_next(graft__radix_node *node, const graft__radix_node *top)
{
    if (node->n_kids > 0)
        return node->kids[0];
    while (node != top) {
        graft__radix_node *parent = node->parent;
        int32_t at = kid_index(node);
        if (at + 1 < parent->n_kids)
            return parent->kids[at + 1];
        node = parent;
    }
    return NULL;
}

void graft__radix_free(graft__radix *tree)
{
    if (tree == NULL)
        return;
    /* post-order by repeatedly freeing a leaf: descend to one, free it, go back up */
    graft__radix_node *node = &tree->root;
    while (node != NULL) {
        if (node->n_kids > 0) {
            node = node->kids[node->n_kids - 1];
            continue;
        }
        graft__radix_node *parent = node->parent;
        if (parent == NULL)
            break;
        parent->n_kids--;
        node_free(node);
        node = parent;
    }
    graft__free(tree->root.kids);
    graft__free(tree);
}

/* ---- insert ---------------------------------------------------------------------------------- */

/* Makes room for one more child of node; false when out of memory (nothing changed). */
static bool reserve_kid(graft__radix_node *node)
{
    if (node->n_kids < node->cap_kids)
        return true;
    int32_t cap = node->cap_kids > 0 ? node->cap_kids * 2 : 2;
    graft__radix_node **kids = graft__realloc(node->kids, (size_t)cap * sizeof *kids);
    if (kids == NULL)
        return false;
    node->kids = kids;
    node->cap_kids = cap;
    return true;
}

static void link_kid(graft__radix_node *parent, graft__radix_node *kid, int32_t at)
{
    memmove(&parent->kids[at + 1], &parent->kids[at],
            (size_t)(parent->n_kids - at) * sizeof *parent->kids);
    parent->kids[at] = kid;
    parent->n_kids++;
    kid->parent = parent;
}

/* A new leaf for key[d, n) under node, at child index `at`. */
static int add_leaf(graft__radix *tree, graft__radix_node *node, int32_t at, const int32_t *key,
                    int32_t d, int32_t n, void *value, graft__radix_node **out)
{
    graft__radix_node *leaf = node_new(key + d, n - d, n, 0);
    if (leaf == NULL || !reserve_kid(node)) {
        if (leaf != NULL)
            node_free(leaf);
        return GRAFT_ENOMEM;
    }
    leaf->value = value;
    link_kid(node, leaf, at);
    tree->n_nodes++;
    tree->n_values++;
    *out = leaf;
    return GRAFT_OK;
}

/* Splits kid (child `at` of its parent) after k < kid->len tokens: a new middle node takes
 * the first k. The key key[0, n) ends at the middle node (d + k == n) or continues in a new
 * leaf under it. */
static int split(graft__radix *tree, graft__radix_node *kid, int32_t at, int32_t k,
                 const int32_t *key, int32_t d, int32_t n, void *value, graft__radix_node **out)
{
    bool ends = d + k == n;
    graft__radix_node *mid = node_new(kid->label, k, d + k, 2);
    graft__radix_node *leaf = ends || mid == NULL ? NULL : node_new(key + d + k, n - d - k, n, 0);
    if (mid == NULL || (!ends && leaf == NULL)) {
        if (mid != NULL)
            node_free(mid);
        return GRAFT_ENOMEM;
    }
    graft__radix_node *parent = kid->parent;
    memmove(kid->label, kid->label + k, (size_t)(kid->len - k) * sizeof *kid->label);
    kid->len -= k;
    parent->kids[at] = mid;
    mid->parent = parent;
    link_kid(mid, kid, 0);
    tree->n_nodes++;
    tree->n_values++;
    if (ends) {
        mid->value = value;
        *out = mid;
        return GRAFT_OK;
    }
    leaf->value = value;
    link_kid(mid, leaf, leaf->label[0] < kid->label[0] ? 0 : 1);
    tree->n_nodes++;
    *out = leaf;
    return GRAFT_OK;
}

int graft__radix_insert(graft__radix *tree, const int32_t *key, size_t n, void *value,
                        graft__radix_node **node_out, void **existing)
{
    *existing = NULL;
    GRAFT_ASSERT(n >= 1 && n <= INT32_MAX && value != NULL);
    const int32_t len = (int32_t)n;
    graft__radix_node *node = &tree->root;
    int32_t d = 0;
    while (d < len) {
        int32_t at;
        graft__radix_node *kid = find_kid(node, key[d], &at);
        if (kid == NULL)
            return add_leaf(tree, node, at, key, d, len, value, node_out);
        int32_t room = kid->len < len - d ? kid->len : len - d;
        int32_t k = common(kid->label, key + d, room);
        if (k < kid->len)
            return split(tree, kid, at, k, key, d, len, value, node_out);
        node = kid;
        d += k;
    }
    *node_out = node;
    if (node->value != NULL) {
        *existing = node->value;
        return GRAFT_OK;
    }
    node->value = value;
    tree->n_values++;
    return GRAFT_OK;
}

/* ---- remove ---------------------------------------------------------------------------------- */

static void unlink_kid(graft__radix_node *kid)
{
    graft__radix_node *parent = kid->parent;
    int32_t at = kid_index(kid);
    memmove(&parent->kids[at], &parent->kids[at + 1],
            (size_t)(parent->n_kids - at - 1) * sizeof *parent->kids);
    parent->n_kids--;
}

/* Joins a valueless node with its only child, which takes its place; false when the joined
 * label cannot be allocated (nothing changed). */
static bool merge(graft__radix *tree, graft__radix_node *node)
{
    graft__radix_node *kid = node->kids[0];
    int32_t *label = graft__malloc((size_t)(node->len + kid->len) * sizeof *label);
    if (label == NULL)
        return false;
    memcpy(label, node->label, (size_t)node->len * sizeof *label);
    memcpy(label + node->len, kid->label, (size_t)kid->len * sizeof *label);
    graft__free(kid->label);
    kid->label = label;
    kid->len += node->len;
    graft__radix_node *parent = node->parent;
    parent->kids[kid_index(node)] = kid;
    kid->parent = parent;
    node_free(node);
    tree->n_nodes--;
    return true;
}

void graft__radix_remove(graft__radix *tree, graft__radix_node *node)
{
    GRAFT_ASSERT(node->value != NULL);
    node->value = NULL;
    tree->n_values--;
    while (node != &tree->root && node->value == NULL) {
        if (node->n_kids == 1) {
            merge(tree, node);
            return;
        }
        if (node->n_kids > 1)
            return;
        graft__radix_node *parent = node->parent;
        unlink_kid(node);
        node_free(node);
        tree->n_nodes--;
        node = parent;
    }
}

/* ---- queries --------------------------------------------------------------------------------- */

void *graft__radix_get(const graft__radix *tree, const int32_t *key, size_t n)
{
    const graft__radix_node *node = &tree->root;
    size_t d = 0;
    while (d < n) {
        int32_t at;
        const graft__radix_node *kid = find_kid(node, key[d], &at);
        if (kid == NULL || (size_t)kid->len > n - d ||
            common(kid->label, key + d, kid->len) < kid->len)
            return NULL;
        node = kid;
        d += (size_t)kid->len;
    }
    return node == &tree->root ? NULL : node->value;
}

static void visit_subtree(graft__radix_node *top, size_t lcp, graft__radix_visit visit,
                          void *user)
{
    for (graft__radix_node *node = top; node != NULL; node = walk_next(node, top))
        if (node->value != NULL)
            visit(node->value, lcp, user);
}

void graft__radix_match(const graft__radix *tree, const int32_t *query, size_t n,
                        graft__radix_visit visit, void *user)
{
    graft__radix_node *node = (graft__radix_node *)&tree->root, *done;
    size_t d = 0;
    for (;;) {
        int32_t at;
        graft__radix_node *kid = d < n ? find_kid(node, query[d], &at) : NULL;
        if (kid == NULL) {
            if (node == &tree->root)
                return;
            visit_subtree(node, d, visit, user);
            done = node;
            node = node->parent;
            break;
        }
        size_t room = (size_t)kid->len < n - d ? (size_t)kid->len : n - d;
        int32_t k = common(kid->label, query + d, (int32_t)room);
        if (k < kid->len) {
            visit_subtree(kid, d + (size_t)k, visit, user);
            done = kid;
            break;
        }
        node = kid;
        d += (size_t)k;
    }
    for (; node != &tree->root; done = node, node = node->parent) {
        if (node->value != NULL)
            visit(node->value, (size_t)node->depth, user);
        for (int32_t i = 0; i < node->n_kids; i++)
            if (node->kids[i] != done)
                visit_subtree(node->kids[i], (size_t)node->depth, visit, user);
    }
}

size_t graft__radix_values(const graft__radix *tree)
{
    return tree->n_values;
}

size_t graft__radix_nodes(const graft__radix *tree)
{
    return tree->n_nodes;
}

static bool check_node(const graft__radix *tree, const graft__radix_node *node, bool compact)
{
    bool ok = node->n_kids <= node->cap_kids;
    if (node != &tree->root) {
        ok = ok && node->len >= 1 && node->depth == node->parent->depth + node->len;
        if (compact && node->value == NULL)
            ok = ok && node->n_kids >= 2;
    }
    for (int32_t i = 0; i < node->n_kids; i++) {
        ok = ok && node->kids[i]->parent == node;
        if (i > 0)
            ok = ok && node->kids[i - 1]->label[0] < node->kids[i]->label[0];
    }
    return ok;
}

bool graft__radix_check(const graft__radix *tree, bool compact)
{
    size_t nodes = 0, values = 0;
    bool ok = tree->root.value == NULL && tree->root.depth == 0;
    graft__radix_node *top = (graft__radix_node *)&tree->root;
    for (graft__radix_node *node = top; node != NULL && ok; node = walk_next(node, top)) {
        nodes++;
        values += node->value != NULL;
        ok = check_node(tree, node, compact);
    }
    return ok && nodes == tree->n_nodes && values == tree->n_values;
}
