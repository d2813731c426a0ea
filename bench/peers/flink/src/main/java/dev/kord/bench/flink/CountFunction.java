package dev.kord.bench.flink;

import java.util.concurrent.atomic.AtomicInteger;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Counts each user's events in keyed state and emits one {@link Result} per
 * event with the count after it.
 */
final class CountFunction extends KeyedProcessFunction<String, Event, Result> {
    private static final long serialVersionUID = 1L;

    /**
     * How many instances have opened in this JVM. Flink opens an instance
     * after its task restored its state and the operators chained after it
     * (the Kafka sink's writer) opened; {@link Main} prints "ready" when all
     * of them have. The job runs in this JVM's MiniCluster with no user jars,
     * so the task's class loader shares this class with Main.
     */
    static final AtomicInteger OPENED = new AtomicInteger();

    private transient ValueState<Long> count;

    @Override
    public void open(OpenContext ctx) {
        count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
        OPENED.incrementAndGet();
    }

    @Override
    public void processElement(Event e, Context ctx, Collector<Result> out) throws Exception {
        Long before = count.value();
        long after = (before == null ? 0 : before) + 1;
        count.update(after);
        out.collect(new Result(e.uuid, e.seq, after, e.ts, e.action, e.page));
    }
}
