from pathlib import Path

PHOTOS = {
    "IMG_20230105_101500.jpg": "2023/01",
    "IMG_20230117_090000.jpg": "2023/01",
    "IMG_20231224_180000.jpg": "2023/12",
    "IMG_20240229_235959.jpg": "2024/02",
}


def test_photos_moved():
    for name, sub in PHOTOS.items():
        assert (Path("/app/photos") / sub / name).is_file(), name


def test_contents_kept():
    for name, sub in PHOTOS.items():
        assert (Path("/app/photos") / sub / name).read_text() == f"pixels of {name[:-4]}\n"


def test_inbox_has_no_photos_left():
    assert not any(Path("/app/inbox").glob("IMG_2*.jpg"))


def test_other_files_stay():
    assert Path("/app/inbox/notes.txt").is_file()
    assert Path("/app/inbox/IMG_bad.jpg").is_file()
