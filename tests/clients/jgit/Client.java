// Drives JGit (org.eclipse.jgit) for packd's client matrix test (crates/packd/tests/clients.rs):
// the same four operations as the other drivers.
//
//   Client clone URL DIR       a bare clone
//   Client shallow URL DIR     a bare clone of depth 1
//   Client fetch DIR           fetch from origin
//   Client push DIR REFSPEC    push REFSPEC to origin
//
// Any error, and any ref the server refuses, exits 1 with the reason on stderr.

import java.io.File;
import org.eclipse.jgit.api.CloneCommand;
import org.eclipse.jgit.api.Git;
import org.eclipse.jgit.transport.FetchResult;
import org.eclipse.jgit.transport.PushResult;
import org.eclipse.jgit.transport.RefSpec;
import org.eclipse.jgit.transport.RemoteRefUpdate;
import org.eclipse.jgit.util.FS;

public final class Client {
    private Client() {}

    public static void main(String[] args) {
        // JGit measures the file system's timestamp resolution once per user (seconds, then
        // kept in ~/.config/jgit): the tests' HOME is new each time, so let it measure aside.
        FS.FileStoreAttributes.setBackground(true);
        try {
            run(args);
        } catch (Exception e) {
            System.err.println("jgit-client: " + e);
            for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
                System.err.println("  caused by: " + c);
            }
            System.exit(1);
        }
        System.exit(0);
    }

    private static void run(String[] args) throws Exception {
        if (args.length < 2) {
            throw new IllegalArgumentException("usage: Client clone|shallow|fetch|push ARGS");
        }
        switch (args[0]) {
            case "clone":
            case "shallow": {
                CloneCommand clone = Git.cloneRepository()
                        .setURI(args[1])
                        .setDirectory(new File(args[2]))
                        .setBare(true);
                if (args[0].equals("shallow")) {
                    clone.setDepth(1);
                }
                clone.call().close();
                break;
            }
            case "fetch": {
                try (Git git = Git.open(new File(args[1]))) {
                    FetchResult result = git.fetch().setRemote("origin").call();
                    if (result.getTrackingRefUpdates().isEmpty()) {
                        throw new IllegalStateException("fetch found nothing new");
                    }
                }
                break;
            }
            case "push": {
                try (Git git = Git.open(new File(args[1]))) {
                    Iterable<PushResult> results = git.push()
                            .setRemote("origin")
                            .setRefSpecs(new RefSpec(args[2]))
                            .call();
                    for (PushResult result : results) {
                        for (RemoteRefUpdate update : result.getRemoteUpdates()) {
                            if (update.getStatus() != RemoteRefUpdate.Status.OK) {
                                throw new IllegalStateException(update.getRemoteName() + ": "
                                        + update.getStatus() + " " + update.getMessage());
                            }
                        }
                    }
                }
                break;
            }
            default:
                throw new IllegalArgumentException("unknown operation " + args[0]);
        }
    }
}
