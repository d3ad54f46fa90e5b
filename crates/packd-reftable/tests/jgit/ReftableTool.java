// Reads and writes reftables with JGit's own reader and writer, for packd's interop test
// (crates/packd-reftable/tests/jgit.rs). Records are lines of tab-separated fields:
//
//   range   MIN MAX
//   ref     NAME UPDATE_INDEX delete | id HEX | peeled HEX PEELED_HEX | symref TARGET
//   log     NAME UPDATE_INDEX delete | update OLD NEW NAME EMAIL TIME TZ_MINUTES MESSAGE
//
//   java ReftableTool dump FILE [NAME...]   prints the table's range, its refs and logs in
//                                           file order, then `seek`-prefixed lines for each
//                                           NAME looked up by seekRef and seekLog
//   java ReftableTool write FILE BLOCK_SIZE  writes the records read from stdin (sorted)

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;

import org.eclipse.jgit.internal.storage.io.BlockSource;
import org.eclipse.jgit.internal.storage.reftable.LogCursor;
import org.eclipse.jgit.internal.storage.reftable.RefCursor;
import org.eclipse.jgit.internal.storage.reftable.ReftableConfig;
import org.eclipse.jgit.internal.storage.reftable.ReftableReader;
import org.eclipse.jgit.internal.storage.reftable.ReftableWriter;
import org.eclipse.jgit.lib.ObjectId;
import org.eclipse.jgit.lib.ObjectIdRef;
import org.eclipse.jgit.lib.PersonIdent;
import org.eclipse.jgit.lib.Ref;
import org.eclipse.jgit.lib.ReflogEntry;
import org.eclipse.jgit.lib.SymbolicRef;

public class ReftableTool {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("dump")) {
            dump(args);
        } else {
            write(args[1], Integer.parseInt(args[2]));
        }
    }

    static String refLine(String prefix, RefCursor c) {
        Ref r = c.getRef();
        String v;
        if (c.wasDeleted()) {
            v = "delete";
        } else if (r.isSymbolic()) {
            v = "symref\t" + r.getTarget().getName();
        } else if (r.getPeeledObjectId() != null) {
            v = "peeled\t" + r.getObjectId().name() + "\t" + r.getPeeledObjectId().name();
        } else {
            v = "id\t" + r.getObjectId().name();
        }
        return prefix + "ref\t" + r.getName() + "\t" + r.getUpdateIndex() + "\t" + v;
    }

    static String logLine(String prefix, LogCursor c) {
        ReflogEntry e = c.getReflogEntry();
        String v;
        if (e == null) {
            v = "delete";
        } else {
            PersonIdent who = e.getWho();
            v = "update\t" + e.getOldId().name() + "\t" + e.getNewId().name() + "\t"
                    + who.getName() + "\t" + who.getEmailAddress() + "\t"
                    + who.getWhenAsInstant().getEpochSecond() + "\t"
                    + (who.getZoneOffset().getTotalSeconds() / 60) + "\t" + e.getComment();
        }
        return prefix + "log\t" + c.getRefName() + "\t" + c.getUpdateIndex() + "\t" + v;
    }

    static void dump(String[] args) throws Exception {
        StringBuilder out = new StringBuilder();
        try (FileInputStream in = new FileInputStream(args[1]);
                ReftableReader r = new ReftableReader(BlockSource.from(in))) {
            r.setIncludeDeletes(true);
            out.append("range\t" + r.minUpdateIndex() + "\t" + r.maxUpdateIndex() + "\n");
            try (RefCursor c = r.allRefs()) {
                while (c.next()) {
                    out.append(refLine("", c)).append('\n');
                }
            }
            try (LogCursor c = r.allLogs()) {
                while (c.next()) {
                    out.append(logLine("", c)).append('\n');
                }
            }
            for (int i = 2; i < args.length; i++) {
                try (RefCursor c = r.seekRef(args[i])) {
                    if (c.next()) {
                        out.append(refLine("seek ", c)).append('\n');
                    } else {
                        out.append("seek missing\t" + args[i] + "\n");
                    }
                }
                try (LogCursor c = r.seekLog(args[i])) {
                    while (c.next()) {
                        out.append(logLine("seek ", c)).append('\n');
                    }
                }
            }
        }
        System.out.print(out);
    }

    static ObjectId id(String hex) {
        return ObjectId.fromString(hex);
    }

    static void write(String file, int blockSize) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        long min = 0, max = 0;
        List<String[]> refs = new ArrayList<>();
        List<String[]> logs = new ArrayList<>();
        for (String line; (line = in.readLine()) != null;) {
            String[] f = line.split("\t", -1);
            if (f[0].equals("range")) {
                min = Long.parseLong(f[1]);
                max = Long.parseLong(f[2]);
            } else if (f[0].equals("ref")) {
                refs.add(f);
            } else {
                logs.add(f);
            }
        }
        // The test gives the records in the order the table stores them.
        ReftableConfig cfg = new ReftableConfig();
        cfg.setRefBlockSize(blockSize);
        cfg.setLogBlockSize(blockSize);
        try (OutputStream os = new FileOutputStream(file)) {
            ReftableWriter w = new ReftableWriter(cfg, os).setMinUpdateIndex(min).setMaxUpdateIndex(max).begin();
            for (String[] f : refs) {
                String name = f[1];
                long idx = Long.parseLong(f[2]);
                Ref ref;
                switch (f[3]) {
                    case "delete":
                        ref = new ObjectIdRef.Unpeeled(Ref.Storage.NEW, name, null);
                        break;
                    case "id":
                        ref = new ObjectIdRef.PeeledNonTag(Ref.Storage.PACKED, name, id(f[4]));
                        break;
                    case "peeled":
                        ref = new ObjectIdRef.PeeledTag(Ref.Storage.PACKED, name, id(f[4]), id(f[5]));
                        break;
                    default:
                        ref = new SymbolicRef(name, new ObjectIdRef.Unpeeled(Ref.Storage.NEW, f[4], null));
                }
                w.writeRef(ref, idx);
            }
            for (String[] f : logs) {
                long idx = Long.parseLong(f[2]);
                if (f[3].equals("delete")) {
                    w.deleteLog(f[1], idx);
                } else {
                    PersonIdent who = new PersonIdent(f[6], f[7], Instant.ofEpochSecond(Long.parseLong(f[8])),
                            ZoneOffset.ofTotalSeconds(Integer.parseInt(f[9]) * 60));
                    w.writeLog(f[1], idx, who, id(f[4]), id(f[5]), f[10]);
                }
            }
            w.finish();
        }
    }
}
