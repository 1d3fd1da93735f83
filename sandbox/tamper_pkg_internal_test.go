package sandbox

import "testing"

func TestDebPoolPath(t *testing.T) {
	st := "Package: libnss-systemd\nStatus: install ok installed\nArchitecture: amd64\nSource: systemd (252.30-1~deb12u2)\nVersion: 252.30-1~deb12u2\n\n" +
		"Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nSource: glibc\nVersion: 2.36-9+deb12u10\n\n" +
		"Package: libssl3\nStatus: install ok installed\nArchitecture: amd64\nSource: openssl\nVersion: 3.0.17-1~deb12u2\n\n" +
		"Package: libzstd1\nStatus: install ok installed\nArchitecture: amd64\nSource: libzstd\nVersion: 1.5.4+dfsg2-5\n\n" +
		"Package: gone\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1:1.0\n\n" +
		"Package: epoch\nStatus: install ok installed\nArchitecture: all\nVersion: 2:1.0-1\n"
	got := parseDpkgStatus([]byte(st))
	want := map[string]string{
		"libnss-systemd:amd64": "pool/main/s/systemd/libnss-systemd_252.30-1~deb12u2_amd64.deb",
		"libc6:amd64":          "pool/main/g/glibc/libc6_2.36-9+deb12u10_amd64.deb",
		"libzstd1:amd64":       "pool/main/libz/libzstd/libzstd1_1.5.4+dfsg2-5_amd64.deb",
		"libssl3:amd64":        "pool/main/o/openssl/libssl3_3.0.17-1~deb12u2_amd64.deb",
		"epoch:all":            "pool/main/e/epoch/epoch_1.0-1_all.deb",
	}
	if len(got) != len(want) {
		t.Fatalf("packages %v", got)
	}
	for k, w := range want {
		if p := got[k].poolPath(false); p != w {
			t.Errorf("%s: %s, want %s", k, p, w)
		}
	}
	if p := got["libc6:amd64"].poolPath(true); p != "pool/updates/main/g/glibc/libc6_2.36-9+deb12u10_amd64.deb" {
		t.Errorf("security: %s", p)
	}
	if usrMerged("/lib/x86_64-linux-gnu/libnss_files.so.2") != "/usr/lib/x86_64-linux-gnu/libnss_files.so.2" || usrMerged("/usr/lib/x") != "/usr/lib/x" {
		t.Error("usrMerged")
	}
}
