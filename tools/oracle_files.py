"""Files of the legacy tools' oracles (tools/openpsg_check, tools/sgb_check, tools/oi_check): the
fixture zips, whose bytes depend on their contents only."""

import zipfile

ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every zip member's time: the bytes depend only on the contents


def write_zip(path, members, compress=zipfile.ZIP_DEFLATED):
    """A zip of {name: bytes}, names sorted, fixed times and modes (644): the same members, the same
    bytes."""
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.compress_type, info.external_attr = compress, 0o644 << 16
            archive.writestr(info, members[name], compresslevel=9)
