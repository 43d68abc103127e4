/* One directory's listing for the git guard's walk, with each file's lstat packed as git's index
 * keeps it (sandbox/gitguard.py: _list, and sandbox/census.py for why the lstat's are kept).
 *
 * Why native: the guard's start walk lists every directory of the workspace and lstat's every file
 * in it, 78,000 on the Linux tree. In Python each lstat builds an os.stat_result of some twenty
 * objects that the first checkpoint then takes apart field by field; here it is one bytes object of
 * 44 bytes, compared with the index's own bytes in one go (abhed/session/seed.py). Everything else
 * (what to watch, what a name means) stays in Python: this only lists and stat's, through the
 * descriptor it is given, never by path.
 *
 * listdir(fd, watched, files) -> (subdirs, watched, specials, restat)
 *   fd       a directory's descriptor (read through a duplicate: its offset is left alone)
 *   watched  a frozenset of names whose presence the guard records
 *   files    None, or a dict that gets name -> record for each regular file, symlink and ".git"
 *   subdirs  list of the names that are directories (d_type, or the lstat when the filesystem
 *            does not say)
 *   watched  list of (name, is_dir) for the watched names present
 *   specials list of (name, S_IFMT of its lstat, 0 when it is gone) for the rest (FIFOs, sockets,
 *            devices)
 *   restat   names given no record (None in `files`): more than one link, a time or a size that
 *            git's 32 bits do not hold, or not a file or symlink (a ".git" directory). The caller
 *            lstat's these itself.
 * A record: ctime s, ctime ns, mtime s, mtime ns, dev, ino, git's mode, uid, gid, size as ten
 * big-endian 32-bit words (the first 40 bytes of an index entry), then st_mode as a 32-bit word.
 * A file that is gone between the listing and its lstat is left out, as Python's scandir would.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RECORD 44
#define U32 0x100000000LL

static void put32(unsigned char *at, uint32_t value)
{
    at[0] = value >> 24;
    at[1] = value >> 16;
    at[2] = value >> 8;
    at[3] = value;
}

/* git's mode of a file or symlink (index entries hold no other kind). */
static uint32_t git_mode(mode_t mode)
{
    if (S_ISLNK(mode))
        return 0120000;
    return (mode & S_IXUSR) ? 0100755 : 0100644;
}

/* The record of `st`, or NULL (and no error) when git's 32 bits cannot hold it exactly. */
static PyObject *record(const struct stat *st)
{
    if (st->st_nlink != 1 || !(S_ISREG(st->st_mode) || S_ISLNK(st->st_mode)))
        return NULL;
    if (st->st_mtim.tv_sec < 0 || st->st_mtim.tv_sec >= U32 || st->st_ctim.tv_sec < 0 || st->st_ctim.tv_sec >= U32
        || st->st_size < 0 || st->st_size >= U32)
        return NULL;
    unsigned char packed[RECORD];
    put32(packed, (uint32_t)st->st_ctim.tv_sec);
    put32(packed + 4, (uint32_t)st->st_ctim.tv_nsec);
    put32(packed + 8, (uint32_t)st->st_mtim.tv_sec);
    put32(packed + 12, (uint32_t)st->st_mtim.tv_nsec);
    put32(packed + 16, (uint32_t)st->st_dev);
    put32(packed + 20, (uint32_t)st->st_ino);
    put32(packed + 24, git_mode(st->st_mode));
    put32(packed + 28, (uint32_t)st->st_uid);
    put32(packed + 32, (uint32_t)st->st_gid);
    put32(packed + 36, (uint32_t)st->st_size);
    put32(packed + 40, (uint32_t)st->st_mode);
    return PyBytes_FromStringAndSize((const char *)packed, RECORD);
}

/* Appends (name, value) to `list`; 0, or -1 with an exception set. */
static int append_pair(PyObject *list, PyObject *name, PyObject *value)
{
    if (value == NULL)
        return -1;
    PyObject *pair = PyTuple_Pack(2, name, value);
    Py_DECREF(value);
    if (pair == NULL)
        return -1;
    int failed = PyList_Append(list, pair);
    Py_DECREF(pair);
    return failed;
}

struct lists {
    PyObject *subdirs, *watched, *specials, *restat;
};

/* Sorts one entry into the lists (and `files`); 0, or -1 with an exception set. */
static int entry(int dir, const struct dirent *found, PyObject *watch, PyObject *files, struct lists *out)
{
    PyObject *name = PyUnicode_DecodeFSDefault(found->d_name);
    if (name == NULL)
        return -1;
    int failed = -1;
    struct stat st;
    int stated = 0;  /* 1: st holds its lstat, -1: the lstat failed (gone) */
    unsigned char type = found->d_type;
    if (type == DT_UNKNOWN) {  /* the filesystem does not say: its lstat does (scandir does the same) */
        stated = fstatat(dir, found->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 1 : -1;
        type = stated < 0 ? DT_UNKNOWN : S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG
             : S_ISLNK(st.st_mode) ? DT_LNK : DT_UNKNOWN;
    }
    int is_dir = type == DT_DIR;
    int is_git = strcmp(found->d_name, ".git") == 0;
    if (is_dir) {
        if (PyList_Append(out->subdirs, name) < 0)
            goto done;
    } else if (type != DT_REG && type != DT_LNK) {
        if (stated == 0)
            stated = fstatat(dir, found->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 1 : -1;
        if (append_pair(out->specials, name, PyLong_FromLong(stated > 0 ? (long)(st.st_mode & S_IFMT) : 0)) < 0)
            goto done;
    }
    if (files != Py_None && (!is_dir || is_git)) {  /* a file, a symlink, a special; a .git of any kind */
        if (stated == 0)
            stated = fstatat(dir, found->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? 1 : -1;
        int noted = is_git || type == DT_REG || type == DT_LNK;
        if (noted && stated > 0) {  /* gone since it was listed: left out */
            PyObject *packed = record(&st);
            if (packed == NULL && PyErr_Occurred())
                goto done;
            if (PyDict_SetItem(files, name, packed != NULL ? packed : Py_None) < 0) {
                Py_XDECREF(packed);
                goto done;
            }
            if (packed == NULL) {
                if (PyList_Append(out->restat, name) < 0)
                    goto done;
            } else {
                Py_DECREF(packed);
            }
        }
    }
    int contained = PySet_Contains(watch, name);
    if (contained < 0)
        goto done;
    if (contained && append_pair(out->watched, name, PyBool_FromLong(is_dir)) < 0)
        goto done;
    failed = 0;
done:
    Py_DECREF(name);
    return failed;
}

static PyObject *listdir(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *watch, *files;
    if (!PyArg_ParseTuple(args, "iO!O:listdir", &fd, &PyFrozenSet_Type, &watch, &files))
        return NULL;
    if (files != Py_None && !PyDict_Check(files)) {
        PyErr_SetString(PyExc_TypeError, "listdir: files must be a dict or None");
        return NULL;
    }
    struct lists out = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0)};
    PyObject *result = NULL;
    DIR *dir = NULL;
    if (!out.subdirs || !out.watched || !out.specials || !out.restat)
        goto done;
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0 || (dir = fdopendir(copy)) == NULL) {
        PyErr_SetFromErrno(PyExc_OSError);
        if (copy >= 0)
            close(copy);
        goto done;
    }
    rewinddir(dir);  /* the duplicate shares the offset: read from the start, as scandir does */
    for (;;) {
        errno = 0;
        struct dirent *found = readdir(dir);
        if (found == NULL) {
            if (errno != 0) {
                PyErr_SetFromErrno(PyExc_OSError);
                goto done;
            }
            break;
        }
        const char *n = found->d_name;
        if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
            continue;
        if (entry(dirfd(dir), found, watch, files, &out) < 0)
            goto done;
    }
    result = PyTuple_Pack(4, out.subdirs, out.watched, out.specials, out.restat);
done:
    if (dir != NULL) {
        rewinddir(dir);  /* and back to the start for the caller's descriptor, as scandir leaves it */
        closedir(dir);
    }
    Py_XDECREF(out.subdirs);
    Py_XDECREF(out.watched);
    Py_XDECREF(out.specials);
    Py_XDECREF(out.restat);
    return result;
}

static PyMethodDef methods[] = {
    {"listdir", listdir, METH_VARARGS, "One directory's listing and its files' packed lstat's (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_listdir", NULL, -1, methods};

PyMODINIT_FUNC PyInit__listdir(void)
{
    return PyModule_Create(&module);
}
