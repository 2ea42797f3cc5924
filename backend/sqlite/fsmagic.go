package sqlite

// networkFSMagic maps the statfs f_type of network and cluster filesystems,
// on which SQLite's WAL mode (shared-memory index, POSIX locks) is unsafe,
// to a readable name.
var networkFSMagic = map[uint32]string{
	0x6969:     "NFS",
	0x517B:     "SMB",
	0xFF534D42: "CIFS",
	0xFE534D42: "SMB2",
	0x00C36400: "Ceph",
	0x01021997: "9p",
	0x5346414F: "AFS",
	0x0BD00BD0: "Lustre",
	0x01161970: "GFS2",
	0x7461636f: "OCFS2",
}

// networkFS reports whether the filesystem magic number names a network
// filesystem, and which.
func networkFS(magic uint32) (name string, network bool) {
	name, network = networkFSMagic[magic]
	return name, network
}
