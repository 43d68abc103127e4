/* The seed's native part (abhed/session/seed.py): the three loops over every entry of the repository's
 * index that the first checkpoint of a large tree waits for (issue 34).
 *
 * Why native: the Linux tree's index has 78,000 entries; reading each in Python (parse_index),
 * judging it (its flags, its blob, its name, its census record, the entry to keep) and making the
 * trees of those kept took a third of a second, which the first bash call waits for. None of the
 * three decides anything the Python code would decide otherwise: `entries` gives up (None) on
 * anything but a well-formed index, so that parse_index says what is wrong; `take` takes only what
 * the Python loop would take and hands it every other entry; `trees` makes the same trees, or none
 * where trees_of makes none. The rules stay in Python, readable and tested; this only skips work.
 *
 * trees(entries, sha1) -> (bodies, cache) | None
 *   seed.trees_of's result for the shadow index's entries (gitindex.Entry, sorted by name): each
 *   directory's tree object body, deepest first, and the index's cache of trees; None where it is.
 *
 * entries(data, version, count) -> (entries, end) | None
 *   The `count` entries of the index `data` (its header read by parse_index: version 2, 3 or 4),
 *   each as parse_index makes it: (name, its ten stat fields, blob id, usable, raw or None), and
 *   the offset after the last; None when an entry is not well formed.
 *
 * take(entries, known, files_of, touched, scopes, limit_ns, fresh_ns, max_bytes, entry_type,
 *      taken, needed, modes) -> rest
 *   entries     the index's entries as seed.parse_index makes them: (name, fields, oid, usable, raw)
 *   known       the blob ids the repository's trusted packs hold
 *   files_of    files_of(directory) -> the census's files of a directory it vouches for, or None
 *   touched     the names the change set since the census names (bytes)
 *   scopes      the directory prefixes below which attributes may convert bytes
 *   limit_ns    entries with an mtime from here on are racily clean
 *   fresh_ns    entries with an mtime or ctime from here on are rewritten (gitindex.entry_of)
 *   max_bytes   checkpoints.max_file_bytes
 *   entry_type  gitindex.Entry
 *   taken, needed, modes   Seeded.entries, the blob ids taken, Seeded.modes: empty, filled here
 *   rest        the entries left to the Python loop, in the index's order
 * An entry is taken here only when all of these hold, each as the Python loop has it: usable, its
 * blob in a trusted pack, a name with no "." or "" component to look at twice (none starting with
 * "." or "/", holding "/." or "//", or ending in "/"), under no converting scope, not racily clean,
 * not fresh, not over max_bytes, its directory vouched for and its name not touched, and a census record (44 bytes) whose first 40 equal the entry's stat fields (its
 * mode among them: a file's or a symlink's). A name met again (a conflict's stages, a crafted
 * index) goes to Python; an index not in git's order is left to Python whole.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#define RECORD 44
#define NAME_MASK 0xFFF
#define NS 1000000000LL

struct inputs {
    PyObject *known, *files_of, *touched, *scopes, *entry_type, *taken, *needed, *modes;
    long long limit_ns, fresh_ns, max_bytes;
};

struct parent {  /* the census's files of the last directory looked up */
    PyObject *name;   /* bytes, or NULL before the first */
    PyObject *files;  /* a dict, or Py_None: not vouched for */
};

static void put32(unsigned char *at, uint32_t value)
{
    at[0] = value >> 24;
    at[1] = value >> 16;
    at[2] = value >> 8;
    at[3] = value;
}

static int suspect(const char *name, Py_ssize_t length)
{
    if (length == 0 || name[0] == '.' || name[0] == '/' || name[length - 1] == '/')
        return 1;
    for (Py_ssize_t i = 0; i + 1 < length; i++)
        if (name[i] == '/' && (name[i + 1] == '.' || name[i + 1] == '/'))
            return 1;
    return 0;
}

/* The census's files of `parent` (a borrowed reference: Py_None when not vouched for), or NULL with an exception. */
static PyObject *files_of(struct inputs *in, struct parent *last, const char *name, Py_ssize_t length)
{
    if (last->name != NULL && PyBytes_GET_SIZE(last->name) == length
        && memcmp(PyBytes_AS_STRING(last->name), name, length) == 0)
        return last->files;
    PyObject *parent = PyBytes_FromStringAndSize(name, length);
    if (parent == NULL)
        return NULL;
    PyObject *files = PyObject_CallOneArg(in->files_of, parent);
    if (files == NULL) {
        Py_DECREF(parent);
        return NULL;
    }
    if (files != Py_None && !PyDict_Check(files)) {
        Py_DECREF(parent);
        Py_DECREF(files);
        PyErr_SetString(PyExc_TypeError, "take: files_of must give a dict or None");
        return NULL;
    }
    Py_XSETREF(last->name, parent);
    Py_XSETREF(last->files, files);
    return files;
}

/* 1: taken (and noted in taken, needed, modes); 0: left to Python; -1: an exception. */
static int take_one(struct inputs *in, struct parent *last, PyObject *entry)
{
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 5)
        return 0;
    PyObject *name = PyTuple_GET_ITEM(entry, 0), *fields = PyTuple_GET_ITEM(entry, 1);
    PyObject *oid = PyTuple_GET_ITEM(entry, 2), *usable = PyTuple_GET_ITEM(entry, 3), *raw = PyTuple_GET_ITEM(entry, 4);
    if (!PyBytes_Check(name) || !PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != 10 || usable != Py_True)
        return 0;
    int known = PySet_Contains(in->known, oid);
    if (known <= 0)
        return known;
    unsigned long long f[10];
    for (int i = 0; i < 10; i++) {
        f[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(fields, i));
        if (f[i] == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;  /* not a field parse_index makes: Python judges it */
        }
        if (f[i] > 0xFFFFFFFFULL)
            return 0;
    }
    const char *text = PyBytes_AS_STRING(name);
    Py_ssize_t length = PyBytes_GET_SIZE(name);
    if (suspect(text, length))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(in->scopes); i++) {
        PyObject *scope = PyTuple_GET_ITEM(in->scopes, i);
        if (!PyBytes_Check(scope))
            return 0;
        Py_ssize_t n = PyBytes_GET_SIZE(scope);
        if (n <= length && memcmp(PyBytes_AS_STRING(scope), text, n) == 0)
            return 0;
    }
    long long mtime_ns = (long long)f[2] * NS + (long long)f[3];
    long long ctime_ns = (long long)f[0] * NS + (long long)f[1];
    if (mtime_ns >= in->limit_ns || mtime_ns >= in->fresh_ns || ctime_ns >= in->fresh_ns || (long long)f[9] > in->max_bytes)
        return 0;
    const char *slash = memrchr(text, '/', length);
    Py_ssize_t parent_length = slash == NULL ? 0 : slash - text;
    const char *base = slash == NULL ? text : slash + 1;
    PyObject *files = files_of(in, last, text, parent_length);
    if (files == NULL)
        return -1;
    if (files == Py_None)
        return 0;
    PyObject *key = PyUnicode_DecodeFSDefaultAndSize(base, length - (base - text));
    if (key == NULL)
        return -1;
    PyObject *record = PyDict_GetItemWithError(files, key);  /* borrowed */
    Py_DECREF(key);
    if (record == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyBytes_Check(record) || PyBytes_GET_SIZE(record) != RECORD)
        return 0;
    int touched = PySet_Contains(in->touched, name);
    if (touched != 0)
        return touched < 0 ? -1 : 0;
    unsigned char stat_bytes[40];
    for (int i = 0; i < 10; i++)
        put32(stat_bytes + 4 * i, (uint32_t)f[i]);
    const unsigned char *have = (const unsigned char *)PyBytes_AS_STRING(record);
    if (memcmp(have, stat_bytes, 40) != 0)
        return 0;  /* (a record's git mode is a file's or a symlink's: no other mode gets here) */
    /* Taken: its entry is the index's bytes (raw, a version 2 entry), or the same bytes as
     * gitindex._packed makes them (a version 3 or 4 index). */
    PyObject *bytes;
    if (PyBytes_Check(raw)) {
        bytes = Py_NewRef(raw);
    } else {
        Py_ssize_t size = 62 + length;
        size += 8 - size % 8;
        bytes = PyBytes_FromStringAndSize(NULL, size);
        if (bytes == NULL)
            return -1;
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(bytes);
        memset(out, 0, size);
        memcpy(out, stat_bytes, 40);
        if (!PyBytes_Check(oid) || PyBytes_GET_SIZE(oid) != 20) {
            Py_DECREF(bytes);
            return 0;
        }
        memcpy(out + 40, PyBytes_AS_STRING(oid), 20);
        unsigned flags = length < NAME_MASK ? (unsigned)length : NAME_MASK;
        out[60] = flags >> 8;
        out[61] = flags & 0xFF;
        memcpy(out + 62, text, length);
    }
    PyObject *items = PyTuple_Pack(4, name, PyTuple_GET_ITEM(fields, 6), oid, bytes);
    Py_DECREF(bytes);
    PyObject *args = items == NULL ? NULL : PyTuple_Pack(1, items);  /* tuple.__new__(entry_type, items) */
    Py_XDECREF(items);
    if (args == NULL)
        return -1;
    PyObject *made = PyTuple_Type.tp_new((PyTypeObject *)in->entry_type, args, NULL);
    Py_DECREF(args);
    if (made == NULL)
        return -1;
    int failed = PyDict_SetItem(in->taken, name, made);
    Py_DECREF(made);
    if (failed < 0 || PySet_Add(in->needed, oid) < 0)
        return -1;
    uint32_t mode = (uint32_t)have[40] << 24 | (uint32_t)have[41] << 16 | (uint32_t)have[42] << 8 | have[43];
    uint32_t perm = mode & 07777;
    if (perm != 0644 && perm != 0755 && S_ISREG(mode)) {
        PyObject *path = PyUnicode_DecodeFSDefaultAndSize(text, length);
        PyObject *bits = path == NULL ? NULL : PyLong_FromUnsignedLong(perm);
        failed = bits == NULL ? -1 : PyDict_SetItem(in->modes, path, bits);
        Py_XDECREF(path);
        Py_XDECREF(bits);
        if (failed < 0)
            return -1;
    }
    return 1;
}

static PyObject *take(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *entries;
    struct inputs in;
    if (!PyArg_ParseTuple(args, "O!O!OO!O!LLLOO!O!O!:take", &PyList_Type, &entries, &PySet_Type, &in.known, &in.files_of,
                          &PySet_Type, &in.touched, &PyTuple_Type, &in.scopes, &in.limit_ns, &in.fresh_ns, &in.max_bytes,
                          &in.entry_type, &PyDict_Type, &in.taken, &PySet_Type, &in.needed, &PyDict_Type, &in.modes))
        return NULL;
    if (!PyType_Check(in.entry_type) || !PyType_IsSubtype((PyTypeObject *)in.entry_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "take: entry_type must be a tuple type");
        return NULL;
    }
    if (PyDict_GET_SIZE(in.taken) != 0 || PyDict_GET_SIZE(in.modes) != 0 || PySet_GET_SIZE(in.needed) != 0) {
        PyErr_SetString(PyExc_ValueError, "take: taken, needed and modes must start empty");
        return NULL;
    }
    PyObject *rest = PyList_New(0);
    if (rest == NULL)
        return NULL;
    struct parent last = {NULL, NULL};
    PyObject *previous = NULL;  /* borrowed: the entry before */
    Py_ssize_t count = PyList_GET_SIZE(entries);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        int order = 1;  /* of this entry's name against the one before: 1 after, 0 the same */
        if (previous != NULL) {
            PyObject *a = PyTuple_Check(previous) && PyTuple_GET_SIZE(previous) == 5 ? PyTuple_GET_ITEM(previous, 0) : NULL;
            PyObject *b = PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 5 ? PyTuple_GET_ITEM(entry, 0) : NULL;
            if (a == NULL || b == NULL || !PyBytes_Check(a) || !PyBytes_Check(b))
                goto whole;
            Py_ssize_t na = PyBytes_GET_SIZE(a), nb = PyBytes_GET_SIZE(b);
            int c = memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), na < nb ? na : nb);
            if (c == 0)
                c = na < nb ? -1 : na > nb ? 1 : 0;
            if (c > 0)
                goto whole;  /* not in git's order: nothing here can say which of a name's entries counts */
            order = c < 0;
        }
        /* A name met again is Python's: the loop runs after this, so what it takes of it replaces
         * what was taken here, as a later entry of a name replaces an earlier one in the loop. */
        int got = order == 0 ? 0 : take_one(&in, &last, entry);
        if (got < 0 || (!got && PyList_Append(rest, entry) < 0))
            goto error;
        previous = entry;
    }
    Py_XDECREF(last.name);
    Py_XDECREF(last.files);
    return rest;
whole:  /* everything back to Python, as if this had not run (the loop would take the same again) */
    PyDict_Clear(in.taken);
    PyDict_Clear(in.modes);
    PySet_Clear(in.needed);
    Py_XDECREF(last.name);
    Py_XDECREF(last.files);
    Py_DECREF(rest);
    return PySequence_List(entries);
error:
    Py_XDECREF(last.name);
    Py_XDECREF(last.files);
    Py_DECREF(rest);
    return NULL;
}


/* -- entries ------------------------------------------------------------------------------------ */

#define ASSUME_VALID 0x8000
#define EXTENDED 0x4000
#define STAGE 0x3000
#define SKIP_WORKTREE 0x4000
#define INTENT_TO_ADD 0x2000

static uint32_t get32(const unsigned char *at)
{
    return (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 | (uint32_t)at[2] << 8 | at[3];
}

/* git's offset varint (index version 4) at data[*at]; -1 when it runs off the end or exceeds `most`. */
static Py_ssize_t varint(const unsigned char *data, Py_ssize_t size, Py_ssize_t *at, Py_ssize_t most)
{
    if (*at >= size)
        return -1;
    unsigned char byte = data[(*at)++];
    Py_ssize_t value = byte & 0x7F;
    while (byte & 0x80) {
        if (*at >= size || value > most)
            return -1;
        byte = data[(*at)++];
        value = ((value + 1) << 7) | (byte & 0x7F);
    }
    return value > most ? -1 : value;
}

/* One entry at data[*offset] appended to `list`: 1 done, 0 not well formed, -1 an exception. */
static int one_entry(const unsigned char *data, Py_ssize_t size, Py_ssize_t end, int version, Py_ssize_t *offset,
                     PyObject **previous, PyObject *list)
{
    Py_ssize_t at = *offset;
    if (at + 62 > end)
        return 0;
    unsigned flags = (unsigned)data[at + 60] << 8 | data[at + 61];
    Py_ssize_t start = at + 62;
    unsigned extended = 0;
    if (flags & EXTENDED) {
        if (version < 3 || start + 2 > size)
            return 0;
        extended = (unsigned)data[start] << 8 | data[start + 1];
        start += 2;
    }
    PyObject *name;
    Py_ssize_t next;
    if (version == 4) {
        Py_ssize_t kept = PyBytes_GET_SIZE(*previous);
        Py_ssize_t strip = varint(data, size, &start, kept);
        if (strip < 0)
            return 0;
        const unsigned char *stop = memchr(data + start, 0, size - start);
        if (stop == NULL)
            return 0;
        Py_ssize_t added = stop - (data + start);
        name = PyBytes_FromStringAndSize(NULL, kept - strip + added);
        if (name == NULL)
            return -1;
        memcpy(PyBytes_AS_STRING(name), PyBytes_AS_STRING(*previous), kept - strip);
        memcpy(PyBytes_AS_STRING(name) + kept - strip, data + start, added);
        next = stop - data + 1;
    } else {
        const unsigned char *stop = memchr(data + start, 0, size - start);
        if (stop == NULL)
            return 0;
        Py_ssize_t length = stop - (data + start);
        name = PyBytes_FromStringAndSize((const char *)data + start, length);
        if (name == NULL)
            return -1;
        next = at + ((start - at + length + 8) & ~(Py_ssize_t)7);
    }
    if (next > end) {
        Py_DECREF(name);
        return 0;
    }
    PyObject *fields = PyTuple_New(10);
    PyObject *oid = PyBytes_FromStringAndSize((const char *)data + at + 40, 20);
    int usable = !(flags & (ASSUME_VALID | STAGE)) && !(extended & (SKIP_WORKTREE | INTENT_TO_ADD));
    PyObject *raw = version != 4 && !(flags & EXTENDED)
                  ? PyBytes_FromStringAndSize((const char *)data + at, next - at) : Py_NewRef(Py_None);
    int failed = fields == NULL || oid == NULL || raw == NULL;
    for (int i = 0; !failed && i < 10; i++) {
        PyObject *value = PyLong_FromUnsignedLong(get32(data + at + 4 * i));
        if (value == NULL)
            failed = 1;
        else
            PyTuple_SET_ITEM(fields, i, value);
    }
    PyObject *entry = failed ? NULL : PyTuple_Pack(5, name, fields, oid, usable ? Py_True : Py_False, raw);
    Py_XDECREF(fields);
    Py_XDECREF(oid);
    Py_XDECREF(raw);
    if (entry == NULL || PyList_Append(list, entry) < 0) {
        Py_XDECREF(entry);
        Py_DECREF(name);
        return -1;
    }
    Py_DECREF(entry);
    Py_SETREF(*previous, name);
    *offset = next;
    return 1;
}

static PyObject *entries(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *source;
    int version;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "O!in:entries", &PyBytes_Type, &source, &version, &count))
        return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(source);
    Py_ssize_t size = PyBytes_GET_SIZE(source), end = size - 20, offset = 12;
    if (version < 2 || version > 4 || count < 0 || end < offset)
        Py_RETURN_NONE;
    PyObject *list = PyList_New(0);
    PyObject *previous = PyBytes_FromStringAndSize(NULL, 0);
    if (list == NULL || previous == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < count; i++) {
        int done = one_entry(data, size, end, version, &offset, &previous, list);
        if (done < 0)
            goto error;
        if (done == 0) {
            Py_DECREF(list);
            Py_DECREF(previous);
            Py_RETURN_NONE;
        }
    }
    Py_DECREF(previous);
    PyObject *result = Py_BuildValue("(Nn)", list, offset);
    return result;
error:
    Py_XDECREF(list);
    Py_XDECREF(previous);
    return NULL;
}


/* -- trees ---------------------------------------------------------------------------------------- */

#define MAX_DEPTH 256

struct item {  /* one entry of a tree: its sort key (a name; a directory's with "/") and its bytes */
    PyObject *key, *bytes;
};

struct node {  /* a directory open on the way to the current entry */
    PyObject *path;     /* bytes */
    struct item *items;
    Py_ssize_t count, room;
    long long below;    /* index entries in its subdirectories */
    PyObject *subdirs;  /* list of their paths */
};

static int item_order(const void *a, const void *b)
{
    PyObject *x = ((const struct item *)a)->key, *y = ((const struct item *)b)->key;
    Py_ssize_t nx = PyBytes_GET_SIZE(x), ny = PyBytes_GET_SIZE(y);
    int c = memcmp(PyBytes_AS_STRING(x), PyBytes_AS_STRING(y), nx < ny ? nx : ny);
    return c != 0 ? c : (nx > ny) - (nx < ny);
}

struct stem {
    const char *at;
    Py_ssize_t size;
};

static int stem_order(const void *a, const void *b)
{
    const struct stem *x = a, *y = b;
    int c = memcmp(x->at, y->at, x->size < y->size ? x->size : y->size);
    return c != 0 ? c : (x->size > y->size) - (x->size < y->size);
}

/* 1 when two items name the same thing (a name twice, or a file and a directory): seed._one_each. */
static int twice(struct node *node)
{
    if (node->count < 2)
        return 0;
    struct stem *stems = PyMem_Malloc(node->count * sizeof(struct stem));
    if (stems == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < node->count; i++) {
        const char *at = PyBytes_AS_STRING(node->items[i].key);
        Py_ssize_t size = PyBytes_GET_SIZE(node->items[i].key);
        while (size > 0 && at[size - 1] == '/')  /* rstrip(b"/") */
            size--;
        stems[i] = (struct stem){at, size};
    }
    qsort(stems, node->count, sizeof(struct stem), stem_order);
    int found = 0;
    for (Py_ssize_t i = 1; i < node->count && !found; i++)
        found = stem_order(&stems[i - 1], &stems[i]) == 0;
    PyMem_Free(stems);
    return found;
}

static int add_item(struct node *node, PyObject *key, PyObject *bytes)  /* steals both */
{
    if (key == NULL || bytes == NULL) {
        Py_XDECREF(key);
        Py_XDECREF(bytes);
        return -1;
    }
    if (node->count == node->room) {
        Py_ssize_t room = node->room ? node->room * 2 : 16;
        struct item *grown = PyMem_Realloc(node->items, room * sizeof(struct item));
        if (grown == NULL) {
            Py_DECREF(key);
            Py_DECREF(bytes);
            PyErr_NoMemory();
            return -1;
        }
        node->items = grown;
        node->room = room;
    }
    node->items[node->count++] = (struct item){key, bytes};
    return 0;
}

static void free_node(struct node *node)
{
    for (Py_ssize_t i = 0; i < node->count; i++) {
        Py_DECREF(node->items[i].key);
        Py_DECREF(node->items[i].bytes);
    }
    PyMem_Free(node->items);
    Py_XDECREF(node->path);
    Py_XDECREF(node->subdirs);
    memset(node, 0, sizeof *node);
}

struct forest {
    PyObject *sha1, *bodies, *done;  /* done: path -> (oid, count, subdirs) */
    struct node stack[MAX_DEPTH];
    int depth;  /* nodes open, the root's included */
};

/* The node's tree: its body appended to bodies, (oid, count, subdirs) noted in done under its path.
 * 1 done, 0 a name there twice (no tree), -1 an exception. */
static int close_tree(struct forest *f, struct node *node, PyObject **oid_out, long long *count_out)
{
    int found = twice(node);
    if (found != 0)
        return found < 0 ? -1 : 0;
    qsort(node->items, node->count, sizeof(struct item), item_order);
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < node->count; i++)
        size += PyBytes_GET_SIZE(node->items[i].bytes);
    char head[32];
    int head_length = snprintf(head, sizeof head, "tree %zd", size);
    PyObject *whole = PyBytes_FromStringAndSize(NULL, head_length + 1 + size);
    if (whole == NULL)
        return -1;
    char *at = PyBytes_AS_STRING(whole);
    memcpy(at, head, head_length + 1);  /* with its NUL */
    at += head_length + 1;
    for (Py_ssize_t i = 0; i < node->count; i++) {
        memcpy(at, PyBytes_AS_STRING(node->items[i].bytes), PyBytes_GET_SIZE(node->items[i].bytes));
        at += PyBytes_GET_SIZE(node->items[i].bytes);
    }
    PyObject *body = PyBytes_FromStringAndSize(PyBytes_AS_STRING(whole) + head_length + 1, size);
    PyObject *hash = body == NULL ? NULL : PyObject_CallOneArg(f->sha1, whole);
    Py_DECREF(whole);
    PyObject *oid = hash == NULL ? NULL : PyObject_CallMethod(hash, "digest", NULL);
    Py_XDECREF(hash);
    long long count = node->below + node->count - PyList_GET_SIZE(node->subdirs);
    PyObject *noted = oid == NULL ? NULL : Py_BuildValue("(OLO)", oid, count, node->subdirs);
    int failed = noted == NULL || PyList_Append(f->bodies, body) < 0 || PyDict_SetItem(f->done, node->path, noted) < 0;
    Py_XDECREF(body);
    Py_XDECREF(noted);
    if (failed) {
        Py_XDECREF(oid);
        return -1;
    }
    *oid_out = oid;
    *count_out = count;
    return 1;
}

/* Closes the innermost open directory into its parent. 1, 0 (no tree), -1. */
static int close_top(struct forest *f)
{
    struct node *node = &f->stack[f->depth - 1], *parent = &f->stack[f->depth - 2];
    PyObject *oid;
    long long count;
    int done = close_tree(f, node, &oid, &count);
    if (done <= 0)
        return done;
    const char *path = PyBytes_AS_STRING(node->path);
    Py_ssize_t length = PyBytes_GET_SIZE(node->path);
    const char *slash = memrchr(path, '/', length);
    const char *name = slash == NULL ? path : slash + 1;
    Py_ssize_t name_length = length - (name - path);
    PyObject *key = PyBytes_FromStringAndSize(NULL, name_length + 1);
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, 6 + name_length + 1 + 20);
    if (key != NULL && bytes != NULL) {
        memcpy(PyBytes_AS_STRING(key), name, name_length);
        PyBytes_AS_STRING(key)[name_length] = '/';
        char *at = PyBytes_AS_STRING(bytes);
        memcpy(at, "40000 ", 6);
        memcpy(at + 6, name, name_length);
        at[6 + name_length] = '\0';
        memcpy(at + 7 + name_length, PyBytes_AS_STRING(oid), 20);
    }
    Py_DECREF(oid);
    int failed = add_item(parent, key, bytes) < 0 || PyList_Append(parent->subdirs, node->path) < 0;
    parent->below += count;
    free_node(node);
    f->depth--;
    return failed ? -1 : 1;
}

static int open_node(struct forest *f, const char *path, Py_ssize_t length)
{
    struct node *node = &f->stack[f->depth];
    memset(node, 0, sizeof *node);
    node->path = PyBytes_FromStringAndSize(path, length);
    node->subdirs = PyList_New(0);
    f->depth++;
    return node->path == NULL || node->subdirs == NULL ? -1 : 0;
}

/* Whether `directory` is `top` or below it. */
static int within(const char *directory, Py_ssize_t length, PyObject *top)
{
    Py_ssize_t n = PyBytes_GET_SIZE(top);
    if (n == 0)
        return 1;
    return length >= n && memcmp(directory, PyBytes_AS_STRING(top), n) == 0 && (length == n || directory[n] == '/');
}

/* trees(entries, sha1) -> (bodies, cache) | None: seed.trees_of, the same result. */
static PyObject *trees(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *entries, *sha1;
    if (!PyArg_ParseTuple(args, "O!O:trees", &PyList_Type, &entries, &sha1))
        return NULL;
    struct forest *f = PyMem_Calloc(1, sizeof(struct forest));
    if (f == NULL)
        return PyErr_NoMemory();
    f->sha1 = sha1;
    f->bodies = PyList_New(0);
    f->done = PyDict_New();
    PyObject *result = NULL, *cache = NULL;
    int made = -1;
    if (f->bodies == NULL || f->done == NULL || open_node(f, "", 0) < 0)
        goto end;
    const char *current = "";
    Py_ssize_t current_length = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 3 || !PyBytes_Check(PyTuple_GET_ITEM(entry, 0))
            || !PyBytes_Check(PyTuple_GET_ITEM(entry, 2)) || PyBytes_GET_SIZE(PyTuple_GET_ITEM(entry, 2)) != 20) {
            PyErr_SetString(PyExc_TypeError, "trees: entries must be gitindex.Entry");
            goto end;
        }
        PyObject *name = PyTuple_GET_ITEM(entry, 0);
        long mode = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
        if (mode == -1 && PyErr_Occurred())
            goto end;
        const char *text = PyBytes_AS_STRING(name);
        Py_ssize_t length = PyBytes_GET_SIZE(name);
        const char *slash = memrchr(text, '/', length);
        Py_ssize_t directory_length = slash == NULL ? 0 : slash - text;
        const char *base = slash == NULL ? text : slash + 1;
        Py_ssize_t base_length = length - (base - text);
        if (base_length == 0) {  /* an empty name, or one ending in "/": no tree names it */
            made = 0;
            goto end;
        }
        if (directory_length != current_length || memcmp(text, current, directory_length) != 0) {
            if (directory_length > 0 && (text[0] == '/' || text[directory_length - 1] == '/'
                                         || memmem(text, directory_length, "//", 2) != NULL)) {
                made = 0;  /* an empty component: it would make a directory with no name */
                goto end;
            }
            while (f->depth > 1 && !within(text, directory_length, f->stack[f->depth - 1].path)) {
                int closed = close_top(f);
                if (closed <= 0) {
                    made = closed;
                    goto end;
                }
            }
            PyObject *top = f->stack[f->depth - 1].path;
            Py_ssize_t top_length = PyBytes_GET_SIZE(top);
            Py_ssize_t from = top_length ? top_length + 1 : 0;  /* the rest of the directory, below top */
            if (from < directory_length) {
                int parts = 1;
                for (Py_ssize_t j = from; j < directory_length; j++)
                    parts += text[j] == '/';
                if (f->depth + parts > MAX_DEPTH) {
                    made = 0;
                    goto end;
                }
                Py_ssize_t j = from;
                while (j <= directory_length) {
                    if (j == directory_length || text[j] == '/') {
                        PyObject *path = PyBytes_FromStringAndSize(text, j);
                        if (path == NULL)
                            goto end;
                        int seen = PyDict_Contains(f->done, path);
                        Py_DECREF(path);
                        if (seen != 0) {  /* not sorted as an index is */
                            made = seen < 0 ? -1 : 0;
                            goto end;
                        }
                        if (open_node(f, text, j) < 0)
                            goto end;
                    }
                    j++;
                }
            }
            current = text;
            current_length = directory_length;
        }
        char field[16];
        int field_length = snprintf(field, sizeof field, "%lo ", (unsigned long)mode);
        PyObject *key = PyBytes_FromStringAndSize(base, base_length);
        PyObject *bytes = PyBytes_FromStringAndSize(NULL, field_length + base_length + 1 + 20);
        if (bytes != NULL) {
            char *at = PyBytes_AS_STRING(bytes);
            memcpy(at, field, field_length);
            memcpy(at + field_length, base, base_length);
            at[field_length + base_length] = '\0';
            memcpy(at + field_length + base_length + 1, PyBytes_AS_STRING(PyTuple_GET_ITEM(entry, 2)), 20);
        }
        if (add_item(&f->stack[f->depth - 1], key, bytes) < 0)
            goto end;
    }
    while (f->depth > 1) {
        int closed = close_top(f);
        if (closed <= 0) {
            made = closed;
            goto end;
        }
    }
    PyObject *oid;
    long long count;
    made = close_tree(f, &f->stack[0], &oid, &count);
    if (made <= 0)
        goto end;
    Py_DECREF(oid);
    /* The cache of trees, pre-order: each directory, then its subdirectories. */
    PyObject *walk = Py_BuildValue("[y#]", "", (Py_ssize_t)0);
    PyObject *parts = PyList_New(0);
    made = -1;
    while (walk != NULL && parts != NULL && PyList_GET_SIZE(walk) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(walk) - 1;
        PyObject *path = Py_NewRef(PyList_GET_ITEM(walk, last));
        if (PyList_SetSlice(walk, last, last + 1, NULL) < 0) {
            Py_DECREF(path);
            break;
        }
        PyObject *noted = PyDict_GetItemWithError(f->done, path);  /* borrowed */
        const char *text = PyBytes_AS_STRING(path);
        Py_ssize_t length = PyBytes_GET_SIZE(path);
        const char *slash = memrchr(text, '/', length);
        const char *name = slash == NULL ? text : slash + 1;
        PyObject *line = NULL;
        if (noted != NULL) {  /* name NUL count SP subtrees LF oid */
            char numbers[64];
            int n = snprintf(numbers, sizeof numbers, "%lld %zd\n", PyLong_AsLongLong(PyTuple_GET_ITEM(noted, 1)),
                             PyList_GET_SIZE(PyTuple_GET_ITEM(noted, 2)));
            Py_ssize_t name_length = length - (name - text);
            line = PyBytes_FromStringAndSize(NULL, name_length + 1 + n + 20);
            if (line != NULL) {
                char *at = PyBytes_AS_STRING(line);
                memcpy(at, name, name_length);
                at[name_length] = '\0';
                memcpy(at + name_length + 1, numbers, n);
                memcpy(at + name_length + 1 + n, PyBytes_AS_STRING(PyTuple_GET_ITEM(noted, 0)), 20);
            }
        }
        Py_DECREF(path);
        if (line == NULL || PyList_Append(parts, line) < 0) {
            Py_XDECREF(line);
            break;
        }
        Py_DECREF(line);
        PyObject *subdirs = PyTuple_GET_ITEM(noted, 2);
        int failed = 0;
        for (Py_ssize_t j = PyList_GET_SIZE(subdirs) - 1; j >= 0 && !failed; j--)
            failed = PyList_Append(walk, PyList_GET_ITEM(subdirs, j)) < 0;
        if (failed)
            break;
        if (PyList_GET_SIZE(walk) == 0)
            made = 1;
    }
    if (made == 1) {
        PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
        cache = empty == NULL ? NULL : _PyBytes_Join(empty, parts);
        Py_XDECREF(empty);
        made = cache == NULL ? -1 : 1;
    }
    Py_XDECREF(walk);
    Py_XDECREF(parts);
end:
    if (made == 1)
        result = PyTuple_Pack(2, f->bodies, cache);
    else if (made == 0 && !PyErr_Occurred())
        result = Py_NewRef(Py_None);
    Py_XDECREF(cache);
    for (int d = 0; d < f->depth; d++)
        free_node(&f->stack[d]);
    Py_XDECREF(f->bodies);
    Py_XDECREF(f->done);
    PyMem_Free(f);
    return result;
}

static PyMethodDef methods[] = {
    {"trees", trees, METH_VARARGS, "seed.trees_of's trees and cache of trees, or None (see the module)."},
    {"entries", entries, METH_VARARGS, "The index's entries as parse_index makes them, or None (see the module)."},
    {"take", take, METH_VARARGS, "Takes the entries the census vouches for unchanged; gives back the rest (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_seed", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__seed(void)
{
    return PyModule_Create(&module);
}
