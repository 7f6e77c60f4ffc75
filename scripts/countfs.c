/*
 * imagekit-countfs: one node's client of the test cluster's shared file system, counting what it reads.
 *
 * scripts/multinode.py gives every node of its multi-node cluster its own mount of this file system
 * over one shared directory (the stand-in for the parallel file system). Each mount is a file system
 * of its own to the kernel, so each node has a page cache of its own, as real nodes do: a byte node 3
 * read is not free for node 4. The daemon passes every operation through to the directory and counts
 * the bytes the node's kernel fetched (reads that missed its page cache), the bytes written, and the
 * metadata operations; reading the file /.imagekit-countfs at the mount's root (not listed) returns
 * the counts as one JSON object.
 *
 *   imagekit-countfs SOURCE MOUNTPOINT PIDFILE [-f] [-o allow_other,default_permissions,auto_cache]
 *
 * Without -f it detaches once mounted, and writes its pid to PIDFILE (whoever stops it reads it).
 *
 * The daemon runs as root and acts for every user: the kernel checks permissions against the modes
 * it reports (default_permissions), and what it creates is given to the caller (or, in a set-group-ID
 * directory, to the directory's group), as a network file system server would. flock(2) locks are
 * passed through, so locks taken by different nodes exclude each other.
 *
 * Build: gcc -O2 -Wall -o imagekit-countfs countfs.c $(pkg-config --cflags --libs fuse3)
 */
#define FUSE_USE_VERSION 35
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define STATS "/.imagekit-countfs"

static int source_fd = -1;
static const char *pid_file;
static unsigned long long n_read_bytes, n_read_calls, n_write_bytes, n_meta, n_opens;

static void add(unsigned long long *counter, unsigned long long n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static unsigned long long get(unsigned long long *counter)
{
	return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* Paths arrive as "/a/b"; every call works relative to the source directory's descriptor. */
static const char *rel(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

static int is_stats(const char *path)
{
	return strcmp(path, STATS) == 0;
}

/* The caller becomes the owner of what it creates; the group is the directory's when it is set-group-ID. */
static int give_to_caller(const char *path, int is_dir)
{
	struct fuse_context *ctx = fuse_get_context();
	char parent[PATH_MAX];
	struct stat pst;
	gid_t gid = ctx->gid;
	char *slash;

	snprintf(parent, sizeof(parent), "%s", rel(path));
	slash = strrchr(parent, '/');
	if (slash != NULL)
		*slash = '\0';
	else
		snprintf(parent, sizeof(parent), ".");
	if (fstatat(source_fd, parent, &pst, AT_SYMLINK_NOFOLLOW) == 0 && (pst.st_mode & S_ISGID))
		gid = (gid_t)-1;
	(void)is_dir;
	if (fchownat(source_fd, rel(path), ctx->uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}

static void *cfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	FILE *fh;

	(void)conn;
	/* Called in the process that serves the mount (after libfuse detached it): its pid. */
	fh = fopen(pid_file, "w");
	if (fh != NULL) {
		fprintf(fh, "%d\n", (int)getpid());
		fclose(fh);
	}
	cfg->use_ino = 1;          /* the source's inode numbers: the same file has one number on every node */
	cfg->nullpath_ok = 1;
	cfg->hard_remove = 1;
	return NULL;
}

static int cfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	add(&n_meta, 1);
	if (path != NULL && is_stats(path)) {
		memset(st, 0, sizeof(*st));
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		return 0;
	}
	if (fi != NULL)
		return fstat(fi->fh, st) < 0 ? -errno : 0;
	return fstatat(source_fd, rel(path), st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int cfs_readlink(const char *path, char *buf, size_t size)
{
	ssize_t n = readlinkat(source_fd, rel(path), buf, size - 1);

	add(&n_meta, 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static int cfs_mknod(const char *path, mode_t mode, dev_t rdev)
{
	add(&n_meta, 1);
	if (mknodat(source_fd, rel(path), mode, rdev) < 0)
		return -errno;
	return give_to_caller(path, 0);
}

static int cfs_mkdir(const char *path, mode_t mode)
{
	add(&n_meta, 1);
	if (mkdirat(source_fd, rel(path), mode) < 0)
		return -errno;
	return give_to_caller(path, 1);
}

static int cfs_unlink(const char *path)
{
	add(&n_meta, 1);
	return unlinkat(source_fd, rel(path), 0) < 0 ? -errno : 0;
}

static int cfs_rmdir(const char *path)
{
	add(&n_meta, 1);
	return unlinkat(source_fd, rel(path), AT_REMOVEDIR) < 0 ? -errno : 0;
}

static int cfs_symlink(const char *target, const char *path)
{
	add(&n_meta, 1);
	if (symlinkat(target, source_fd, rel(path)) < 0)
		return -errno;
	return give_to_caller(path, 0);
}

static int cfs_rename(const char *from, const char *to, unsigned int flags)
{
	add(&n_meta, 1);
	if (syscall(SYS_renameat2, source_fd, rel(from), source_fd, rel(to), flags) < 0)
		return -errno;
	return 0;
}

static int cfs_link(const char *from, const char *to)
{
	add(&n_meta, 1);
	return linkat(source_fd, rel(from), source_fd, rel(to), 0) < 0 ? -errno : 0;
}

static int cfs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	add(&n_meta, 1);
	if (fi != NULL)
		return fchmod(fi->fh, mode) < 0 ? -errno : 0;
	return fchmodat(source_fd, rel(path), mode, 0) < 0 ? -errno : 0;
}

static int cfs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	add(&n_meta, 1);
	if (fi != NULL)
		return fchown(fi->fh, uid, gid) < 0 ? -errno : 0;
	return fchownat(source_fd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int cfs_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	int fd, ret;

	add(&n_meta, 1);
	if (fi != NULL)
		return ftruncate(fi->fh, size) < 0 ? -errno : 0;
	fd = openat(source_fd, rel(path), O_WRONLY | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	ret = ftruncate(fd, size) < 0 ? -errno : 0;
	close(fd);
	return ret;
}

static int cfs_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
	add(&n_meta, 1);
	if (fi != NULL)
		return futimens(fi->fh, tv) < 0 ? -errno : 0;
	return utimensat(source_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int cfs_open(const char *path, struct fuse_file_info *fi)
{
	int fd;

	add(&n_opens, 1);
	if (is_stats(path)) {
		if ((fi->flags & O_ACCMODE) != O_RDONLY)
			return -EACCES;
		fi->direct_io = 1;
		fi->fh = (uint64_t)-1;
		return 0;
	}
	fd = openat(source_fd, rel(path), (fi->flags & ~O_CREAT) | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	fi->fh = fd;
	return 0;
}

static int cfs_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int fd, ret;

	add(&n_opens, 1);
	fd = openat(source_fd, rel(path), fi->flags | O_CREAT | O_NOFOLLOW, mode);
	if (fd < 0)
		return -errno;
	ret = give_to_caller(path, 0);
	if (ret == 0 && fchmod(fd, mode) < 0)   /* a chown clears set-ID bits: put the asked mode back */
		ret = -errno;
	if (ret < 0) {
		close(fd);
		return ret;
	}
	fi->fh = fd;
	return 0;
}

static int stats_read(char *buf, size_t size, off_t offset)
{
	char text[512];
	int len = snprintf(text, sizeof(text),
			   "{\"read_bytes\": %llu, \"read_calls\": %llu, \"write_bytes\": %llu, "
			   "\"meta_ops\": %llu, \"opens\": %llu}\n",
			   get(&n_read_bytes), get(&n_read_calls), get(&n_write_bytes), get(&n_meta), get(&n_opens));

	if (offset >= len)
		return 0;
	if ((size_t)(len - offset) < size)
		size = len - offset;
	memcpy(buf, text + offset, size);
	return size;
}

static int cfs_read(const char *path, char *buf, size_t size, off_t offset, struct fuse_file_info *fi)
{
	ssize_t n;

	if (fi->fh == (uint64_t)-1)
		return stats_read(buf, size, offset);
	(void)path;
	n = pread(fi->fh, buf, size, offset);
	if (n < 0)
		return -errno;
	add(&n_read_bytes, n);
	add(&n_read_calls, 1);
	return n;
}

static int cfs_write(const char *path, const char *buf, size_t size, off_t offset, struct fuse_file_info *fi)
{
	ssize_t n;

	(void)path;
	n = pwrite(fi->fh, buf, size, offset);
	if (n < 0)
		return -errno;
	add(&n_write_bytes, n);
	return n;
}

static int cfs_statfs(const char *path, struct statvfs *st)
{
	(void)path;
	return fstatvfs(source_fd, st) < 0 ? -errno : 0;
}

static int cfs_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	if (fi->fh != (uint64_t)-1)
		close(fi->fh);
	return 0;
}

static int cfs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void)path;
	if (fi == NULL || fi->fh == (uint64_t)-1)
		return 0;
	return (datasync ? fdatasync(fi->fh) : fsync(fi->fh)) < 0 ? -errno : 0;
}

static int cfs_flock(const char *path, struct fuse_file_info *fi, int op)
{
	(void)path;
	if (fi->fh == (uint64_t)-1)
		return -EINVAL;
	return flock(fi->fh, op) < 0 ? -errno : 0;
}

static int cfs_opendir(const char *path, struct fuse_file_info *fi)
{
	int fd;
	DIR *dir;

	add(&n_meta, 1);
	fd = openat(source_fd, rel(path), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (dir == NULL) {
		close(fd);
		return -errno;
	}
	fi->fh = (uint64_t)(uintptr_t)dir;
	return 0;
}

static int cfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t offset,
		       struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	DIR *dir = (DIR *)(uintptr_t)fi->fh;
	struct dirent *de;

	(void)path;
	(void)flags;
	add(&n_meta, 1);
	if (offset == 0)
		rewinddir(dir);
	else
		seekdir(dir, offset);
	while ((de = readdir(dir)) != NULL) {
		struct stat st;

		memset(&st, 0, sizeof(st));
		st.st_ino = de->d_ino;
		st.st_mode = de->d_type << 12;
		if (fill(buf, de->d_name, &st, telldir(dir), 0))
			break;
	}
	return 0;
}

static int cfs_releasedir(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	closedir((DIR *)(uintptr_t)fi->fh);
	return 0;
}

static int cfs_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
	DIR *dir = (DIR *)(uintptr_t)fi->fh;

	(void)path;
	return (datasync ? fdatasync(dirfd(dir)) : fsync(dirfd(dir))) < 0 ? -errno : 0;
}

static const struct fuse_operations ops = {
	.init = cfs_init,
	.getattr = cfs_getattr,
	.readlink = cfs_readlink,
	.mknod = cfs_mknod,
	.mkdir = cfs_mkdir,
	.unlink = cfs_unlink,
	.rmdir = cfs_rmdir,
	.symlink = cfs_symlink,
	.rename = cfs_rename,
	.link = cfs_link,
	.chmod = cfs_chmod,
	.chown = cfs_chown,
	.truncate = cfs_truncate,
	.utimens = cfs_utimens,
	.open = cfs_open,
	.create = cfs_create,
	.read = cfs_read,
	.write = cfs_write,
	.statfs = cfs_statfs,
	.release = cfs_release,
	.fsync = cfs_fsync,
	.flock = cfs_flock,
	.opendir = cfs_opendir,
	.readdir = cfs_readdir,
	.releasedir = cfs_releasedir,
	.fsyncdir = cfs_fsyncdir,
};

int main(int argc, char *argv[])
{
	char *args[argc];
	int n = 0;

	if (argc < 4 || argv[1][0] != '/' || argv[3][0] != '/') {
		fprintf(stderr, "usage: %s /SOURCE MOUNTPOINT /PIDFILE [fuse options]\n", argv[0]);
		return 2;
	}
	pid_file = argv[3];
	source_fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (source_fd < 0) {
		perror(argv[1]);
		return 1;
	}
	umask(0);   /* the modes the kernel hands over are already masked by the caller's umask */
	args[n++] = argv[0];
	args[n++] = argv[2];
	for (int i = 4; i < argc; i++)
		args[n++] = argv[i];
	return fuse_main(n, args, &ops, NULL);
}
