package dev.kord.bench.flink;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.stream.Stream;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Finds where a new run of the job resumes from. Flink resumes from a
 * checkpoint by itself only within one run (a task failure); a new JVM
 * starts a new job, with a new job id, and must be given the checkpoint to
 * restore. The job keeps its checkpoints after it ends
 * (RETAIN_ON_CANCELLATION), so the newest one that Flink completed is where
 * the previous run stopped.
 *
 * <p>The layout under the job's directory is Flink's own:
 *
 * <pre>
 * checkpoints/&lt;job id&gt;/chk-&lt;n&gt;/_metadata   one directory per run
 * savepoints/savepoint-&lt;...&gt;/_metadata       written by a graceful stop
 * </pre>
 *
 * A checkpoint is complete once its _metadata file is written; Flink writes
 * it last. A file cut short by a crash does not parse, and is passed over.
 * When a graceful stop ends the job, Flink deletes the job's last
 * checkpoint (retention applies to cancelled and failed jobs, not finished
 * ones), the savepoint stays, and the next run resumes from it; a stop cut
 * short by the exit may leave that checkpoint half-deleted, which the rule
 * above passes over.
 */
final class Resume {
    private static final Logger LOG = LoggerFactory.getLogger(Resume.class);

    private static final String METADATA = "_metadata";

    private Resume() {}

    /**
     * The newest completed checkpoint or savepoint under the two
     * directories, or empty when there is none. The result is the
     * checkpoint's directory, the form execution.state-recovery.path takes.
     *
     * <p>Newest is by checkpoint id, not by file time: a run that resumes
     * from checkpoint n numbers its checkpoints and savepoints from n + 1,
     * so the ids order the checkpoints of all runs. A run with nothing to
     * resume from numbers from 1 again, but then nothing before it was
     * readable. Of equal ids, which should not occur, the later metadata
     * file wins.
     */
    static Optional<Path> latest(Path checkpoints, Path savepoints) throws IOException {
        List<Path> dirs = new ArrayList<>();
        // checkpoints/<job id>/chk-<n>/_metadata
        for (Path job : children(checkpoints)) {
            for (Path chk : children(job)) {
                if (chk.getFileName().toString().startsWith("chk-")) {
                    dirs.add(chk);
                }
            }
        }
        // savepoints/savepoint-<...>/_metadata
        dirs.addAll(children(savepoints));
        Path best = null;
        long bestId = Long.MIN_VALUE;
        long bestTime = Long.MIN_VALUE;
        for (Path dir : dirs) {
            if (!Files.isRegularFile(dir.resolve(METADATA))) {
                continue; // not completed, or deleted half-way
            }
            OptionalLong id = checkpointId(dir);
            if (id.isEmpty()) {
                continue;
            }
            long time = Files.getLastModifiedTime(dir.resolve(METADATA)).toMillis();
            if (id.getAsLong() > bestId || (id.getAsLong() == bestId && time > bestTime)) {
                best = dir;
                bestId = id.getAsLong();
                bestTime = time;
            }
        }
        return Optional.ofNullable(best);
    }

    /**
     * Deletes every checkpoint and savepoint but keep: all of them are older
     * than keep or incomplete, so no later run would resume from them. It
     * also removes the empty job directories that runs leave behind (a run
     * that resumed in CLAIM mode deletes the checkpoint it took over, but
     * not the directory of the run that wrote it). Main calls it only when
     * there is a checkpoint to keep, so that a directory holding nothing
     * readable is left as it is for a person to look at.
     */
    static void prune(Path checkpoints, Path savepoints, Path keep) throws IOException {
        for (Path job : children(checkpoints)) {
            if (!keep.startsWith(job)) {
                delete(job);
                continue;
            }
            for (Path chk : children(job)) {
                if (chk.getFileName().toString().startsWith("chk-") && !chk.equals(keep)) {
                    delete(chk);
                }
            }
        }
        for (Path sp : children(savepoints)) {
            if (!sp.equals(keep)) {
                delete(sp);
            }
        }
    }

    /** The id of the checkpoint in dir, or empty when its metadata does not load. */
    private static OptionalLong checkpointId(Path dir) {
        Path file = dir.resolve(METADATA);
        try (InputStream in = Files.newInputStream(file);
                DataInputStream data = new DataInputStream(in)) {
            return OptionalLong.of(Checkpoints.loadCheckpointMetadata(
                            data, Resume.class.getClassLoader(), dir.toString())
                    .getCheckpointId());
        } catch (IOException | RuntimeException e) {
            LOG.warn("passing over checkpoint {}: its metadata does not load: {}", dir, e.toString());
            return OptionalLong.empty();
        }
    }

    private static List<Path> children(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            return List.of();
        }
        try (Stream<Path> s = Files.list(dir)) {
            return s.filter(Files::isDirectory).sorted().toList();
        }
    }

    /** Deletes dir and everything under it. */
    static void delete(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
