package dev.kord.bench.flink;

/**
 * One output record: the event's uuid, seq and ts, and the user's count after
 * it. action and page (with --lake only) go to the lake, not to Kafka.
 */
public class Result {
    public String uuid;
    public long seq;
    /** The user's count including this event: seq + 1 when counted exactly once. */
    public long count;
    public String ts;
    /** The event's action, with --lake; null otherwise. */
    public String action;
    /** The event's page, with --lake; null otherwise. */
    public String page;

    public Result() {}

    public Result(String uuid, long seq, long count, String ts, String action, String page) {
        this.uuid = uuid;
        this.seq = seq;
        this.count = count;
        this.ts = ts;
        this.action = action;
        this.page = page;
    }
}
